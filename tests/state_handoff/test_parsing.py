"""The Spark parser against the oracle's own rules, value by value, on the awkward values a topic can hold.

The parser takes two paths: one typed parse answers for every record it accepts, and a record it refuses (bad
syntax, a number field that does not convert) parses again field by field. Both are here: a refused record must
still be dead-lettered for the right reason, with the fields that did parse.

Left out, where Spark and the oracle part ways before the parser had two paths: an object key (Spark keeps its
text as written, the oracle re-serialises it), text after a complete object (Spark reads the object and stops), a
number given twice whose second is not a number (Spark keeps the first)."""

from __future__ import annotations

from datetime import datetime

from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.language.spec import Field, Pipeline, count, total
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
    # the accepted event times' ends, and instants past them that the time pattern accepts (years 10000 and 0)
    b'{"key":"k","event_time":"9999-12-31T23:30:00-01:00","amount":2}',
    b'{"key":"k","event_time":"0001-01-01T00:30:00+01:00","amount":2}',
    b'{"key":"k","event_time":"0002-01-01T00:00:00Z","amount":2}',
    b'{"key":"k","event_time":"0001-12-31T23:59:59.999999Z","amount":2}',
    b'{"key":"k","event_time":"9998-12-31T23:59:59.999999Z","amount":2}',
    b'{"key":"k","event_time":"9999-01-01T00:00:00Z","amount":2}',
    b'{"key":"k","event_time":"9999-01-01T00:30:00+01:00","amount":2}',
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
                                                           "bad_event_time", "bad_amount", "out_of_range_event_time"}
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


def test_a_declared_range_of_event_times_narrows_what_counts(spark):
    """A pipeline that accepts only [2020, 2030): a record of 2031 is dead-lettered, one of 2029 counts; an optional
    timestamp outside the range is null, its record kept."""
    from datetime import timezone

    narrow = Pipeline(
        name="narrow", key="key", event_time="event_time", event_id="event_id",
        fields=(Field("event_id", "string", required=False), Field("key", "string"),
                Field("event_time", "timestamp"), Field("seen", "timestamp", required=False),
                Field("amount", "number")),
        aggregations=(count("n"),),
        event_times=(datetime(2020, 1, 1, tzinfo=timezone.utc), datetime(2030, 1, 1, tzinfo=timezone.utc)))
    values = [b'{"key":"k","event_time":"2029-12-31T23:59:59Z","amount":1}',
              b'{"key":"k","event_time":"2030-01-01T00:00:00Z","amount":1}',
              b'{"key":"k","event_time":"2019-12-31T23:00:00-01:00","amount":1}',
              b'{"key":"k","event_time":"2025-01-01T00:00:00Z","seen":"2031-01-01T00:00:00Z","amount":1}']
    records = spark.createDataFrame([(0, i, v) for i, v in enumerate(values)],
                                    "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    rows = sorted(parse_events(narrow, records).collect(), key=lambda r: r.kafka_offset)
    assert [r.error for r in rows] == [None, "out_of_range_event_time", None, None]
    assert rows[2].event_time == datetime(2020, 1, 1) and rows[3].seen is None


def _varint(n: int) -> bytes:
    """Avro's zig-zag base-128 encoding of a long."""
    n, out = (n << 1) ^ (n >> 63), b""
    while True:
        byte, n = n & 0x7F, n >> 7
        if not n:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


def test_an_avro_length_beyond_the_record_is_refused_without_allocating_it(spark, tmp_path):
    """A 20-byte Avro value whose string claims 2 GiB: the decoder refuses the length (it exceeds the record size
    limit, which bounds every string, bytes and collection inside a record) instead of allocating it, and the record
    is dead-lettered as bad_avro beside a well-formed one."""
    import json

    from switchyard.state_handoff.language.spec import AvroFormat

    schema = tmp_path / "e.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "E", "fields": [
        {"name": "key", "type": "string"}, {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "id", "type": "string"}]}))
    avro = Pipeline(name="avro", key="key", event_time="at", event_id="id",
                    fields=(Field("key", "string"), Field("at", "timestamp"), Field("id", "string", required=False)),
                    aggregations=(count("n"),), avro=AvroFormat(schema=schema, schema_id=3))
    header = b"\x00" + (3).to_bytes(4, "big")
    key = _varint(1) + b"k"
    good = header + key + _varint(1767225600000) + _varint(2) + b"e1"
    huge = header + key + _varint(1767225600000) + _varint(2 ** 31 - 16) + b"e1"
    records = spark.createDataFrame([(0, 0, good), (0, 1, huge)], "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    rows = sorted(parse_events(avro, records).collect(), key=lambda r: r.kafka_offset)
    assert [r.error for r in rows] == [None, "bad_avro"]
    assert rows[0].id == "e1" and rows[0].at == datetime(2026, 1, 1)
