"""A pipeline declaration is refused at import, in one line naming the rule, when the phases could not run it
faithfully."""

import pytest

from switchyard.state_handoff.language.spec import RECORD_COLUMNS, Field, Pipeline, count, total

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


def test_a_declared_range_of_event_times_must_fit_every_layer():
    """The accepted event times default to [0002-01-01, 9999-01-01); a declared range must be aware and lie where a
    window, a local zone and the watermark's lateness stay inside Python's years 1-9999."""
    from datetime import datetime, timedelta, timezone

    from switchyard.state_handoff.language.spec import EVENT_TIMES, TumblingWindows

    assert _pipeline().accepted_times == EVENT_TIMES == (datetime(2, 1, 1, tzinfo=timezone.utc),
                                                          datetime(9999, 1, 1, tzinfo=timezone.utc))
    utc = timezone.utc
    with pytest.raises(ValueError, match="event_times must be aware"):
        Pipeline(name="p", key="key", event_time="at", event_id="id", fields=BASE, aggregations=(count("n"),),
                 event_times=(datetime(2020, 1, 1), datetime(2030, 1, 1)))
    for bad in [(datetime(2030, 1, 1, tzinfo=utc), datetime(2020, 1, 1, tzinfo=utc)),
                (datetime(1, 1, 1, tzinfo=utc), datetime(2020, 1, 1, tzinfo=utc)),
                (datetime(2020, 1, 1, tzinfo=utc), datetime(9999, 12, 31, tzinfo=utc))]:
        with pytest.raises(ValueError, match="pipeline p: event_times .* must be a range within"):
            Pipeline(name="p", key="key", event_time="at", event_id="id", fields=BASE, aggregations=(count("n"),),
                     event_times=bad)
    with pytest.raises(ValueError, match="declare a narrower one"):  # lateness of two years past the default start
        Pipeline(name="p", key="key", event_time="at", event_id="id", fields=BASE, aggregations=(count("n"),),
                 windows=TumblingWindows(timedelta(hours=1), timedelta(days=730), (count("w"),)))
