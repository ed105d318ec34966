"""The Spark parser against the oracle's own rules, value by value, on the awkward values a topic can hold.

The parser takes two paths: one typed parse answers for every record it accepts, and a record it refuses (bad
syntax, a number field that does not convert) parses again field by field. Both are here: a refused record must
still be dead-lettered for the right reason, with the fields that did parse.

Left out, where Spark and the oracle part ways before the parser had two paths: an object key (Spark keeps its
text as written, the oracle re-serialises it), text after a complete object (Spark reads the object and stops), a
number given twice whose second is not a number (Spark keeps the first)."""

from __future__ import annotations

from datetime import datetime

from state_handoff.parsing import parse_events
from state_handoff.pipelines import get_pipeline
from state_handoff.spec import Field, Pipeline, count, total
from tests.support.oracle import classify, classify_fields

PIPELINE = get_pipeline("demo")
TIME = '"event_time":"2026-01-01T10:00:00Z"'
GOOD = '"event_id":"e1","key":"k",' + TIME

VALUES = [
    None, b"", b" ", b"null", b"1", b'"text"', b"[]", b"{}", b"{", b"not json {", b"\xff\xfe\x00garbage",
    f'[{{{GOOD},"amount":1.5}}]'.encode(),
    # accepted by the typed parse
    f'{{{GOOD},"amount":1.5}}'.encode(),
    f'{{{GOOD},"amount":-3,"kind":"x"}}'.encode(),
    f' {{{GOOD},"amount":0.25}}'.encode(),
    f'{{"amount":2,{GOOD}}}'.encode(),
    f'{{{GOOD},"amount":null}}'.encode(),
    f'{{{GOOD}}}'.encode(),
    f'{{{GOOD},"amount":1e999}}'.encode(),
    f'{{{GOOD},"amount":NaN}}'.encode(),
    f'{{"key":7,{TIME},"amount":2,"event_id":9}}'.encode(),
    b'{"key":"k","event_time":"2026-01-01T10:00:00+01:00","amount":2}',
    b'{"key":"k","event_time":"2026-02-30T00:00:00Z","amount":2}',
    b'{"key":"k","event_time":"yesterday","amount":2}',
    b'{"key":"k","event_time":"2026-01-01T24:00:00Z","amount":2}',
    b'{"key":"k","event_time":"2026-01-01T10:00:60Z","amount":2}',
    b'{"key":"k","event_time":"2024-02-29T23:59:59.123456-05:30","amount":2}',
    b'{"key":"k","event_time":"2026-01-01 10:00:00Z","amount":2}',
    b'{"key":"k","event_time":"2026-01-01T10:00:00","amount":2}',
    b'{"key":"k","event_time":"2026-01-01","amount":2}',
    b'{"key":"","event_time":"2026-01-01T10:00:00Z","amount":2}',
    b'{"event_time":"2026-01-01T10:00:00Z","amount":2}',
    # refused by the typed parse: a number that does not convert, or bad syntax
    f'{{{GOOD},"amount":"12.5"}}'.encode(),
    f'{{{GOOD},"amount":"NaN"}}'.encode(),
    f'{{{GOOD},"amount":true}}'.encode(),
    f'{{{GOOD},"amount":{{"x":1}}}}'.encode(),
    f'{{{GOOD},"amount":[1]}}'.encode(),
    f'{{"amount":"x",{GOOD}}}'.encode(),
    b'{"key":"k","event_time":12,"amount":"x"}',
    b'{"event_time":"2026-01-01T10:00:00Z","amount":"x"}',
    f'{{{GOOD},"amount":1.5'.encode(),
    f'{{{GOOD},"amount":'.encode(),
    f'{{"amount":3,{GOOD}'.encode(),
]


def test_every_value_parses_as_the_oracle_says(spark):
    records = spark.createDataFrame([(0, i, v) for i, v in enumerate(VALUES)],
                                    "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    rows = {r.kafka_offset: r for r in parse_events(PIPELINE, records).collect()}
    assert len(rows) == len(VALUES)
    mismatches = []
    for offset, value in enumerate(VALUES):
        reason, event = classify(value)
        row = rows[offset]
        got = (row.error, None if row.error else (row.key, row.event_id, row.event_time, row.amount))
        want = (reason, None if reason else (event.key, event.event_id, event.event_time, event.amount))
        if got != want:
            mismatches.append((value, got, want))
    assert not mismatches, mismatches
    # both paths ran: accepted values and refused ones of each reason
    assert {rows[i].error for i in range(len(VALUES))} >= {None, "tombstone", "not_json_object", "missing_key",
                                                           "bad_event_time", "bad_amount"}
    assert isinstance(rows[12].event_time, datetime) and rows[12].amount == 1.5


NESTED = Pipeline(
    name="nested", key="user", event_time="at", event_id="id",
    fields=(Field("id", "string", required=False, path="meta.id"), Field("user", "string", path="payload.user.id"),
            Field("at", "timestamp", path="meta.at"), Field("amount", "number", path="payload.amount"),
            Field("kind", "string", required=False, path="type")),
    aggregations=(count("n"), total("amount_sum", "amount")))
META = '"meta":{"id":"e1","at":"2026-01-01T10:00:00Z"}'
NESTED_VALUES = [
    f'{{{META},"payload":{{"user":{{"id":"u1"}},"amount":2.5}},"type":"buy"}}'.encode(),
    f'{{"type":"buy","payload":{{"amount":1,"user":{{"id":"u2","extra":[1,2]}}}},{META}}}'.encode(),
    f'{{{META},"payload":{{"user":{{"id":7}},"amount":1}}}}'.encode(),  # a string field takes any value as text
    f'{{{META},"payload":{{"user":{{"id":"u1"}},"amount":"2.5"}}}}'.encode(),  # refused: a quoted number
    f'{{{META},"payload":{{"user":{{"id":"u1"}}}}}}'.encode(),
    f'{{{META},"payload":{{"user":null,"amount":1}}}}'.encode(),
    f'{{{META},"payload":{{"user":"u1","amount":1}}}}'.encode(),  # refused: an object on the path is a string
    f'{{{META},"payload":"flat","type":"buy"}}'.encode(),
    f'{{{META},"payload":[1,2]}}'.encode(),
    f'{{{META}}}'.encode(),
    b'{"meta":{"id":"e1"},"payload":{"user":{"id":"u1"},"amount":1}}',
    b'{"meta":"2026-01-01T10:00:00Z","payload":{"user":{"id":"u1"},"amount":1}}',
    f'{{{META},"payload":{{"user":{{"id":"u1"}},"amount":1e999}}}}'.encode(),
    f'{{{META},"payload":{{"user":{{"id":""}},"amount":1}}}}'.encode(),
    f'{{{META},"payload":{{"user":{{"id":"u1"}},"amount":1}}'.encode(),  # truncated
    b'[]', None,
]


def test_fields_at_nested_paths_parse_as_the_oracle_says(spark):
    records = spark.createDataFrame([(0, i, v) for i, v in enumerate(NESTED_VALUES)],
                                    "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    rows = {r.kafka_offset: r for r in parse_events(NESTED, records).collect()}
    names = [f.name for f in NESTED.fields]
    mismatches = []
    for offset, value in enumerate(NESTED_VALUES):
        reason, event = classify_fields(value, NESTED.fields)
        row = rows[offset]
        got = (row.error, None if row.error else {n: row[n] for n in names})
        if got != (reason, event):
            mismatches.append((value, got, (reason, event)))
    assert not mismatches, mismatches
    assert {rows[i].error for i in rows} >= {None, "missing_user", "bad_amount", "bad_at", "not_json_object",
                                             "tombstone"}
    assert rows[2].user == "7" and rows[1].kind == "buy" and rows[0].amount == 2.5
