"""The input topic as Kafka may hand it over: transactions (aborted ones in the middle of the input) and
partitions added after a handoff; each run archive -> backfill -> handoff -> stream, against the oracle."""

from __future__ import annotations

import json
import uuid
from datetime import datetime

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.io.kafka_security import librdkafka_config
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.streams import (QUIET, assert_matches_oracle, start_stream, stop_stream, stream_read, tail_events,
                                   wait_until)

PIPELINE = get_pipeline("demo")


def transaction(bootstrap: str, topic: str, records: list[tuple], commit: bool) -> None:
    """`records` (key, value, partition, _) in one transaction of a transactional producer, committed or aborted."""
    from confluent_kafka import Producer

    producer = Producer({**librdkafka_config(bootstrap), "transactional.id": f"test-{uuid.uuid4().hex[:8]}",
                         "acks": "all"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for key, value, partition, _ in records:
        producer.produce(topic, value, key, partition)
    producer.flush(30)
    if commit:
        producer.commit_transaction(30)
    else:
        producer.abort_transaction(30)


def aborted_records(tag: str, partitions: int) -> list[tuple]:
    """Well-formed events of keys no committed record has, with amounts that would show in any sum, and a
    malformed one per partition that would show in `dead_letter`."""
    records = []
    for i in range(4 * partitions):
        key = f"aborted-{tag}-{i % 3}"
        body = {"event_id": f"aborted-{tag}-{i}", "key": key, "event_time": "2026-01-02T23:30:00Z",
                "amount": 100_000 + i}
        records.append((key.encode(), json.dumps(body).encode(), i % partitions, None))
    records += [(b"bad", b"{aborted, not json", p, None) for p in range(partitions)]
    return records


def tail_committed(bootstrap: str, topic: str, tables: Tables) -> int:
    """The committed records past the handoff's start offsets: what the stream must read."""
    start = handoff_log.offsets(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    return sum(1 for r in oracle.read_topic(bootstrap, topic) if r.offset >= start.get(r.partition, 0))


def test_aborted_transactions_are_never_input(spark, bootstrap, topic_name, tmp_path):
    """Aborted transactions in the archived range, in the backfill's Kafka tail and in the stream's input; a
    committed transaction's records are input like any other. Nothing aborted is aggregated or dead-lettered, and
    records read per partition count the records a read_committed consumer sees (markers and aborted offsets are
    in no count)."""
    run_generate(bootstrap, topic_name, events=900, keys=20, partitions=3, days=2, seed=7, malformed_rate=0.03,
                 out=QUIET)
    transaction(bootstrap, topic_name, aborted_records("archive", 3), commit=False)
    transaction(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 18), 12, seed=20)[:12], commit=True)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    transaction(bootstrap, topic_name, aborted_records("tail", 3), commit=False)
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 19), 60, seed=21))
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None, kafka_tail_from=bootstrap)
    run_handoff(spark, PIPELINE, tables, bootstrap)

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 120, seed=22))
        transaction(bootstrap, topic_name, aborted_records("stream", 3), commit=False)
        transaction(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 1), 30, seed=23)[:30], commit=True)
        total = tail_committed(bootstrap, topic_name, tables)
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} committed tail records read")
    finally:
        stop_stream(proc, log)
    expected = assert_matches_oracle(spark, bootstrap, topic_name, tables)
    assert not any(key.startswith("aborted-") for key in expected.state)


def grow(bootstrap: str, topic: str, partitions: int) -> None:
    """Give `topic` `partitions` partitions, and wait until clients see them all."""
    import time

    from kafka.admin import NewPartitions

    from switchyard.state_handoff.io.kafka_io import admin_client, partitions_of

    with admin_client(bootstrap) as admin:
        admin.create_partitions({topic: NewPartitions(total_count=partitions)})
    deadline = time.monotonic() + 30
    while len(partitions_of(bootstrap, topic)) < partitions and time.monotonic() < deadline:
        time.sleep(0.25)


def test_partitions_added_after_the_handoff_are_streamed_from_their_start(spark, bootstrap, topic_name, tmp_path):
    """One partition added between the handoff and the stream's start (the stream starts it at offset 0 and
    records so in STREAM_STARTED), another while the stream runs (Spark's source reads it from its earliest)."""
    run_generate(bootstrap, topic_name, events=600, keys=15, partitions=2, days=2, seed=9, malformed_rate=0.03,
                 out=QUIET)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=0.8),
                out=lambda *_: None)
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)
    assert sorted(handoff.start_offsets) == [0, 1]
    grow(bootstrap, topic_name, 3)
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 18), 30, seed=30))

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 90, seed=31))
        total = tail_committed(bootstrap, topic_name, tables)
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
        grow(bootstrap, topic_name, 4)
        produce(bootstrap, topic_name, tail_events(4, datetime(2026, 1, 3, 1), 80, seed=32))
        total = tail_committed(bootstrap, topic_name, tables)
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
    finally:
        stop_stream(proc, log)
    started = [e for e in handoff_log.entries(tables) if e.status == Status.STREAM_STARTED]
    assert details.of(started[0]).added_partitions == {"2": 0}
    expected = assert_matches_oracle(spark, bootstrap, topic_name, tables)
    assert expected.read[2] > 0 and expected.read[3] > 0
