"""A pipeline declaration is refused at import, in one line naming the rule, when the phases could not run it
faithfully."""

import pytest

from state_handoff.spec import RECORD_COLUMNS, Field, Pipeline, count, total

BASE = (Field("id", "string"), Field("key", "string"), Field("at", "timestamp"))


def _pipeline(*fields: Field, aggregations=(count("n"),)) -> Pipeline:
    return Pipeline(name="p", key="key", event_time="at", event_id="id", fields=BASE + fields,
                    aggregations=aggregations)


@pytest.mark.parametrize("name", [*RECORD_COLUMNS, "__typed"])
def test_a_field_named_like_a_column_every_record_carries_is_refused(name):
    """Before this rule a field `value` replaced the raw record: the archive kept the parsed number instead of the
    bytes, and the backfill dead-lettered every archived record as not_json_object."""
    with pytest.raises(ValueError, match=f"pipeline p: a field cannot be named '{name}', a column every record "
                                         "carries"):
        _pipeline(Field(name, "number"), aggregations=(count("n"), total("s", name)))


def test_the_declared_fields_rules_hold():
    assert _pipeline(Field("amount", "number"), aggregations=(total("s", "amount"),)).key == "key"
    with pytest.raises(ValueError, match="pipeline p: aggregation s reads undeclared field 'amount'"):
        _pipeline(aggregations=(total("s", "amount"),))
    with pytest.raises(ValueError, match="pipeline p: field 'when' is not declared"):
        Pipeline(name="p", key="key", event_time="when", event_id="id", fields=BASE, aggregations=(count("n"),))
