"""The time boundary mode end to end on the real broker: the stream starts at Kafka's offsets for a time T,
re-reads the archived records after T, and skips them, so every record still counts once."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import admin_client, create_topic, offset_bounds, produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows
from tests.support.streams import event_batches, start_stream, wait_until

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = 2
QUIET = lambda *_: None  # noqa: E731


def _ms(t: datetime) -> int:
    return int(t.replace(tzinfo=timezone.utc).timestamp() * 1000)


def _records(tag: str, start: datetime, count: int) -> list[tuple]:
    """(key, value, partition, timestamp_ms) with the Kafka timestamp = event time, up to 3 minutes out of order.

    Event ids are unique; every 40th event has none and every 25th record is malformed (unique bytes), so both
    kinds of identity are exercised.
    """
    records = []
    for i in range(count):
        t = start + timedelta(seconds=30 * i + (i * 7919) % 361 - 180)
        key = f"key-{(i * 7) % 17:03d}"
        partition = i % PARTITIONS
        if i % 25 == 24:
            records.append((key.encode(), f'{{"key": "{key}", "event_time": "later", "n": "{tag}-{i}"}}'.encode(),
                            partition, _ms(t)))
            continue
        body = {"key": key, "event_time": t.strftime("%Y-%m-%dT%H:%M:%SZ"), "amount": round((i * 13.7) % 500 - 50, 2),
                "kind": "purchase"}
        if i % 40:
            body["event_id"] = f"{tag}-{i}"
        records.append((key.encode(), json.dumps(body).encode(), partition, _ms(t)))
    return records


def _late_records(tag: str) -> list[tuple]:
    """Events for hours the backlog finalized long ago, with Kafka timestamps that old too: inside the overlap's
    time range but never archived, so they must not be skipped."""
    records = []
    for i in range(6):
        t = datetime(2026, 1, 2, i % 3, 15)
        body = {"event_id": f"{tag}-late-{i}", "key": f"key-{i:03d}", "event_time": t.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "amount": 10 + i, "kind": "late"}
        records.append((f"key-{i:03d}".encode(), json.dumps(body).encode(), i % PARTITIONS, _ms(t)))
    return records


def _timestamps_by_offset(records: list[tuple]) -> dict[int, list[int]]:
    """Per partition, the Kafka timestamps in offset order (one producer, a fresh topic: offsets follow sends)."""
    by_partition: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    for _, _, partition, timestamp_ms in records:
        by_partition[partition].append(timestamp_ms)
    return by_partition


def _prepare(spark, bootstrap, topic, warehouse) -> tuple[Tables, dict[int, int], dict[int, list[int]]]:
    create_topic(bootstrap, topic, PARTITIONS)
    backlog = _records("a", datetime(2026, 1, 2), 1200)
    produce(bootstrap, topic, backlog)
    tables = Tables(str(warehouse), PIPELINE.name)
    cut = archive_cut(bootstrap, topic, fraction=0.8)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, cut, out=QUIET)
    run_backfill(spark, PIPELINE, tables, out=QUIET)
    return tables, {p: end for p, (_, end) in cut.items()}, _timestamps_by_offset(backlog)


def _stream_accounting(tables: Tables) -> dict[int, dict]:
    return {int(p): a for p, a in (pipeline_status(tables).get("stream_accounting") or {}).items()}


def _batches_after_archive(tables: Tables, handoff_id: str, archive_end: dict[int, int]) -> list[dict[int, int]]:
    """The stream's batch boundaries as the oracle's tail sees them: re-read archived offsets lie before the tail."""
    return [{p: max(v["last_offset"], archive_end[p] - 1) for p, v in b.items()}
            for b in event_batches(tables, handoff_id)]


def test_time_boundary_skips_the_archived_overlap(spark, bootstrap, topic_name, tmp_path):
    tables, archive_end, timestamps = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    newest = max(ts for p, stamps in timestamps.items() for ts in stamps[:archive_end[p]])
    newest_archived = datetime.fromtimestamp(newest / 1000, timezone.utc).replace(tzinfo=None)
    at = newest_archived - timedelta(minutes=30)

    with pytest.raises(UserError, match="after the newest archived Kafka timestamp"):
        run_handoff(spark, PIPELINE, tables, bootstrap, boundary="time", at=newest_archived + timedelta(minutes=1))
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED) is None

    handoff = run_handoff(spark, PIPELINE, tables, bootstrap, boundary="time", at=at)
    # Kafka's offsets for T: the first record of each partition with a timestamp at or after T
    want_start = {p: next(o for o, ts in enumerate(stamps) if ts >= _ms(at)) for p, stamps in timestamps.items()}
    assert handoff.start_offsets == want_start
    assert all(handoff.start_offsets[p] < archive_end[p] for p in range(PARTITIONS)), "no real overlap"
    committed = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    assert committed.boundary_mode == "time" and datetime.fromisoformat(committed.at) == at
    assert datetime.fromisoformat(committed.overlap_until) == newest_archived
    assert Path(committed.overlap).is_dir()
    assert run_handoff(spark, PIPELINE, tables, bootstrap, boundary="time", at=at).reused
    with pytest.raises(UserError, match="already committed with boundary time"):
        run_handoff(spark, PIPELINE, tables, bootstrap, boundary="offsets")

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        produce(bootstrap, topic_name, _records("b", datetime(2026, 1, 2, 10, 30), 200))
        wait_until(lambda: event_batches(tables, handoff.handoff_id), proc, log, what="a first event batch")
        produce(bootstrap, topic_name, _records("c", datetime(2026, 1, 2, 12, 30), 100) + _late_records("c"))
        latest = offset_bounds(bootstrap, topic_name)
        total = sum(hi - handoff.start_offsets[p] for p, (_, hi) in latest.items())
        wait_until(lambda: sum(a["read"] for a in _stream_accounting(tables).values()) >= total, proc, log,
                    what=f"{total} records read from the start offsets")
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]

    records = oracle.read_topic(bootstrap, topic_name)
    everything = oracle.backlog(records)
    assert_state_matches(spark, tables, everything)  # each record counted once: no overlap record twice
    assert sum(r.event_count for r in rows(spark, tables.state)) == sum(everything.well_formed.values())

    stream = _stream_accounting(tables)
    backfill = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED)).accounting
    for p in range(PARTITIONS):
        s, b = stream[p], backfill[str(p)]
        assert s["skipped_overlap"] == archive_end[p] - handoff.start_offsets[p]  # the re-read archived records
        assert s["read"] == s["well_formed"] + s["dead_lettered"] + s["skipped_overlap"]
        assert b["read"] + s["read"] - s["skipped_overlap"] == everything.read[p]

    dead = [(r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.dead_letter)]
    assert len(dead) == len(set(dead)), "a malformed record of the overlap was dead-lettered twice"
    assert {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)} \
        == everything.dead_letter

    archived = [r for r in records if r.offset < archive_end[r.partition]]
    tail = [r for r in records if r.offset >= archive_end[r.partition]]
    expected = oracle.through_stream(archived, tail, _batches_after_archive(tables, handoff.handoff_id, archive_end))
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    late = {(r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.late)}
    assert late == expected.late and len(late) >= 6
    assert len(event_batches(tables, handoff.handoff_id)) >= 2


def test_time_boundary_refuses_when_records_before_t_are_gone(spark, bootstrap, topic_name, tmp_path):
    from kafka import TopicPartition

    tables, archive_end, timestamps = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    at = datetime.fromtimestamp(timestamps[1][archive_end[1] - 20] / 1000, timezone.utc).replace(tzinfo=None)
    with admin_client(bootstrap) as admin:  # partition 1 now starts after T: what lay before T is unknowable
        admin.delete_records({TopicPartition(topic_name, 1): archive_end[1] - 1})
    with pytest.raises(UserError, match=r"partition 1 no longer retains a record before .*pass a later --at"):
        run_handoff(spark, PIPELINE, tables, bootstrap, boundary="time", at=at)
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED) is None
