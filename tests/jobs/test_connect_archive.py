"""An archive Kafka Connect's S3 sink wrote, taken in as the pipeline's archive: offsets recovered from the file
names and places, a gap refused, then backfill, handoff and stream to the topic's end, exactly once, against plain
Python over the same records; over a transactional topic, a file whose offsets cannot be known refused."""

from __future__ import annotations

import io
import json
import os
import re
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.connect_archive import _lines, connect_files, import_connect_archive
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import StreamOptions, run_stream
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import read_record
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_kafka_input import transaction
from tests.support import oracle

PIPELINE = get_pipeline("demo")
TOPIC = "connect.archived"
FLUSH = 70  # records per file, as the sink's flush.size


def _quiet(*_):
    pass


def _as_connect_line(value: bytes | None) -> bytes:
    """What the sink's JSON format holds for a record: its value on one line; a record it could not have written as
    one line (no value, not UTF-8, a line break) stands as a broken line, malformed all the same."""
    if value is None or b"\n" in value:
        return b'{"broken'
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return b'{"broken'
    return value


def _write_connect(folder, records, until: dict[int, int]) -> list[oracle.KafkaRecord]:
    """The sink's files for offsets below `until` of each partition, FLUSH records each; the records as archived."""
    archived = []
    for p in sorted(until):
        mine = [r for r in records if r.partition == p and r.offset < until[p]]
        for i in range(0, len(mine), FLUSH):
            chunk = mine[i:i + FLUSH]
            target = folder / "topics" / TOPIC / f"partition={p}" / f"{TOPIC}+{p}+{chunk[0].offset}.json"
            target.parent.mkdir(parents=True, exist_ok=True)
            lines = [_as_connect_line(r.value) for r in chunk]
            target.write_bytes(b"\n".join(lines) + b"\n")
            archived += [oracle.KafkaRecord(r.partition, r.offset, r.key, line) for r, line in zip(chunk, lines)]
    return archived


@pytest.mark.timeout(1800)
def test_a_kafka_connect_archive_backfills_and_hands_off_exactly_once(spark, bootstrap, tmp_path):
    run_generate(bootstrap, TOPIC, events=700, keys=15, partitions=2, days=2, seed=31, malformed_rate=0.04,
                 out=io.StringIO())
    records = oracle.read_topic(bootstrap, TOPIC)
    ends = {p: max(r.offset for r in records if r.partition == p) + 1 for p in {r.partition for r in records}}
    until = {p: int(end * 0.8) for p, end in ends.items()}
    connect = tmp_path / "connect"
    archived = _write_connect(connect, records, until)
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)

    # a file gone from the middle of a partition: refused in one line, nothing committed
    holed = tmp_path / "holed"
    shutil.copytree(connect, holed)
    middle = [f.path for f in connect_files(str(holed), None) if f.partition == 1][1]  # by start offset
    os.remove(middle)
    with pytest.raises(UserError, match=rf"Kafka Connect archive: partition 1: offsets {FLUSH}\.\.{2 * FLUSH - 1} "
                                        "are in no file"):
        import_connect_archive(spark, PIPELINE, tables, str(holed), bootstrap, out=_quiet)
    assert read_record(tables.archive)[1] is None

    said = import_connect_archive(spark, PIPELINE, tables, str(connect), bootstrap, out=_quiet)
    assert f"{len(archived)} records of {TOPIC}" in said
    record = read_record(tables.archive)[1]
    assert record["cut"] == {str(p): o for p, o in until.items()} and record["first"] == {"0": 0, "1": 0}
    again = import_connect_archive(spark, PIPELINE, tables, str(connect), bootstrap, out=_quiet)
    assert "archived already" in again, "taken in once"

    run_backfill(spark, PIPELINE, tables, out=_quiet)
    switch = run_handoff(spark, PIPELINE, tables, bootstrap)
    assert switch.start_offsets == until, "the stream starts where the Connect files end"
    run_stream(spark, PIPELINE, tables, bootstrap,
               StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=_quiet)

    tail = [r for r in records if r.offset >= until[r.partition]]
    expected = oracle.backlog(archived + tail)
    state = {r["key"]: r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert {k: (s["event_count"], s["amount_min"], s["amount_max"]) for k, s in state.items()} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.state.items()}
    dead = DeltaTable(tables.dead_letter).to_pyarrow_table().num_rows
    assert sum(s.event_count for s in expected.state.values()) + dead == len(records), "every record, once"
    assert dead == len(expected.dead_letter) > 0


def test_the_parquet_format_keeps_each_row_as_its_json(spark, tmp_path):
    folder = tmp_path / "topics" / "t" / "partition=3"
    folder.mkdir(parents=True)
    rows = pa.table({"key": ["a", "b", "c"], "amount": [1.5, 2.0, None]})
    pq.write_table(rows, folder / "t+3+40.parquet")
    files = connect_files(str(tmp_path), "t")
    assert [(f.partition, f.start, f.format) for f in files] == [(3, 40, "parquet")]
    lines = sorted((r.position, json.loads(bytes(r.value))) for r in _lines(spark, files).collect())
    assert lines == [(0, {"key": "a", "amount": 1.5}), (1, {"key": "b", "amount": 2.0}), (2, {"key": "c"})]


def test_an_empty_json_file_holds_no_record(spark, tmp_path):
    """A zero-byte file (a sink that rolled a file before any record) holds no offset, so it ends where it starts."""
    folder = tmp_path / "topics" / "t" / "partition=0"
    folder.mkdir(parents=True)
    (folder / "t+0+3.json").write_bytes(b"")
    (folder / "t+0+3x.json").write_bytes(b"")  # not the sink's name: ignored
    (folder / "t+0+1.json").write_bytes(b'{"a": 1}\n{"a": 2}\n')
    (folder / "t+0+0.json").write_bytes(b'{"a": 0}\n')
    files = connect_files(str(tmp_path), "t")
    assert [f.start for f in files] == [0, 1, 3]
    lines = sorted((r.start, r.position, bytes(r.value)) for r in _lines(spark, files).collect())
    assert lines == [(0, 0, b'{"a": 0}'), (1, 0, b'{"a": 1}'), (1, 1, b'{"a": 2}')]


def test_a_last_file_over_a_transactional_topic_is_refused_where_its_offsets_have_gaps(spark, bootstrap, tmp_path,
                                                                                     topic_name):
    """Each committed transaction leaves a marker at the offset after its records: a file holding two transactions
    (offsets 0..4, 6..10) read as 10 consecutive offsets would number the second one 5..9 and end the archive at
    10, and the stream would count offset 10 again. Refused, nothing committed; a file holding the first
    transaction alone fills 0..4 and is taken in."""
    from switchyard.state_handoff.io.kafka_io import create_topic

    create_topic(bootstrap, topic_name, partitions=1)
    for first in (0, 5):
        transaction(bootstrap, topic_name, [(b"k", json.dumps({
            "event_id": f"e{i}", "key": "k", "event_time": "2026-01-01T10:00:00Z", "amount": i}).encode(), 0, None)
            for i in range(first, first + 5)], commit=True)
    records = oracle.read_topic(bootstrap, topic_name)
    offsets = [r.offset for r in records]
    assert len(records) == 10 and offsets[:5] == [0, 1, 2, 3, 4] and offsets[-1] > 9, (
        "a marker after each transaction", offsets)
    shown = sum(1 for o in offsets if o < 10)

    def connect_file(folder, chunk):
        target = folder / "topics" / topic_name / "partition=0" / f"{topic_name}+0+{chunk[0].offset}.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"\n".join(r.value for r in chunk) + b"\n")

    both = tmp_path / "both"
    connect_file(both, records)
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    with pytest.raises(UserError, match=rf"Kafka Connect archive: partition 0: {re.escape(topic_name)}\+0\+0\.json "
                                        rf"holds 10 records, but Kafka shows {shown} at offsets 0\.\.9"):
        import_connect_archive(spark, PIPELINE, tables, str(both), bootstrap, out=_quiet)
    assert read_record(tables.archive)[1] is None, "nothing committed"

    first = tmp_path / "first"
    connect_file(first, records[:5])
    import_connect_archive(spark, PIPELINE, tables, str(first), bootstrap, out=_quiet)
    assert read_record(tables.archive)[1]["cut"] == {"0": 5}
