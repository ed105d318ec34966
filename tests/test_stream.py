"""The switch end to end on the real broker: backfill, handoff, stream while events arrive, against the oracle."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from deltalake import DeltaTable

from jobs.archive import archive_cut, run_archive
from jobs.backfill import run_backfill
from jobs.inputs.generate import run_generate
from state_handoff import delta_upkeep, handoff_log, storage, stream_progress
from state_handoff.errors import UserError
from state_handoff.handoff import run_handoff
from state_handoff.kafka_io import admin_client, produce, topic_config
from state_handoff.pipelines import get_pipeline
from state_handoff.status import pipeline_status
from state_handoff.stream_layout import stream_dir
from state_handoff.tables import Tables
from state_handoff.lifecycle import Status
from tests import oracle
from tests.stream_process import event_batches, start_stream, wait_until
from tests.compare import assert_state_matches, assert_windows_match, rows

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[1]
TIDY_EVERY_2 = {delta_upkeep.EVERY_ENV: "2"}  # a killed stream restarts between compactions
QUIET = open(os.devnull, "w")


def _prepare(spark, bootstrap, topic, warehouse, partitions=3, events=2400, add_partition=False) -> Tables:
    """Generate, archive 80%, backfill; optionally grow the topic by a partition; hand off."""
    run_generate(bootstrap, topic, events=events, keys=30, partitions=partitions, days=2, seed=11,
                 malformed_rate=0.03, out=QUIET)
    tables = Tables(str(warehouse), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.8), out=lambda *_: None)
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    if add_partition:
        from kafka.admin import NewPartitions

        with admin_client(bootstrap) as admin:
            admin.create_partitions({topic: NewPartitions(total_count=partitions + 1)})
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)
    if add_partition:
        assert handoff.start_offsets[partitions] == 0
    return tables


def _tail_events(topic_partitions: int, start: datetime, count: int, seed: int) -> list[tuple]:
    """New events after the backlog, plus records for windows the backlog finalized, plus malformed ones."""
    records = []
    for i in range(count):
        t = start + timedelta(seconds=37 * i)
        key = f"key-{(i * 7) % 23:06d}"
        body = {"event_id": f"tail-{seed}-{i}", "key": key, "event_time": t.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "amount": round((i * 13.7) % 500 - 50, 2), "kind": "tail"}
        records.append((key.encode(), json.dumps(body).encode(), i % topic_partitions, None))
    for i in range(12):  # late: their hour ended long before the backlog watermark
        key = f"key-{i % 5:06d}"
        body = {"event_id": f"late-{seed}-{i}", "key": key, "event_time": f"2026-01-01T0{i % 6}:15:00Z",
                "amount": 10 + i, "kind": "late"}
        records.append((key.encode(), json.dumps(body).encode(), i % topic_partitions, None))
    bad = [None, b"{not json", b'{"key": "", "event_time": "2026-01-02T00:00:00Z", "amount": 1}',
           b'{"key": "k", "event_time": "2026-01-02T00:00:00Z", "amount": "7"}']
    records += [(b"bad", v, i % topic_partitions, None) for i, v in enumerate(bad)]
    return records


def _stream_read(tables: Tables) -> int:
    return sum(p["read"] for p in (pipeline_status(tables).get("stream_accounting") or {}).values())


def _latest_total(bootstrap, topic, start: dict[int, int]) -> int:
    from state_handoff.kafka_io import offset_bounds

    return sum(hi - start.get(p, 0) for p, (_, hi) in offset_bounds(bootstrap, topic).items())


def _batches(tables: Tables, handoff_id: str) -> list[dict[int, int]]:
    return [{p: v["last_offset"] for p, v in b.items()} for b in event_batches(tables, handoff_id)]


def _stop(proc: subprocess.Popen, log: Path) -> None:
    os.kill(proc.pid, signal.SIGTERM)  # the CLI process only: it stops its queries and logs STOPPED
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]


def assert_matches_oracle(spark, bootstrap, topic, tables: Tables):
    handoff = handoff_log.latest(None, tables, Status.HANDOFF_COMMITTED)
    start = handoff_log.offsets(handoff)
    records = oracle.read_topic(bootstrap, topic)
    archived = [r for r in records if r.offset < start.get(r.partition, 0)]
    tail = [r for r in records if r.offset >= start.get(r.partition, 0)]
    expected = oracle.through_stream(archived, tail, _batches(tables, handoff.handoff_id))

    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    late = {(r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.late)}
    assert late == expected.late and len(expected.late) >= 12
    dead = {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)}
    assert dead == expected.dead_letter
    # the accounting identity per partition over both phases: nothing vanished, nothing counted twice
    backfill = handoff_log.details(handoff_log.latest(None, tables, Status.BACKFILL_COMMITTED))["accounting"]
    status = pipeline_status(tables)
    for p in expected.read:
        b = backfill.get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        s = status["stream_accounting"].get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        assert b["read"] + s["read"] == expected.read[p]
        assert b["well_formed"] + s["well_formed"] == expected.well_formed[p]
        assert b["read"] + s["read"] == b["well_formed"] + s["well_formed"] + b["dead_lettered"] + s["dead_lettered"]
    assert sum(r.event_count for r in rows(spark, tables.state)) == sum(expected.well_formed.values())
    return expected


def test_switch_to_stream_matches_oracle(spark, bootstrap, topic_name, tmp_path):
    """...with the stream's tables compacted after every batch (state_handoff/delta_upkeep.py; every 100th by
    default), while both Delta-writing queries write: nothing a batch wrote is lost to a compaction."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", add_partition=True)
    handoff = handoff_log.latest(None, tables, Status.HANDOFF_COMMITTED)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, env={delta_upkeep.EVERY_ENV: "1"})
    try:
        produce(bootstrap, topic_name, _tail_events(4, datetime(2026, 1, 2, 20), 300, seed=1))
        wait_until(lambda: handoff_log.latest(None, tables, Status.SWITCHED) is not None, proc, log,
                    what="SWITCHED")
        second = subprocess.run([sys.executable, "-m", "jobs.cli", "stream", "--pipeline", "demo", "--warehouse",
                                 tables.warehouse, "--bootstrap", bootstrap], capture_output=True, text=True, cwd=ROOT)
        assert second.returncode == 2 and "already running" in second.stderr and "Traceback" not in second.stderr
        produce(bootstrap, topic_name, _tail_events(4, datetime(2026, 1, 3, 4), 200, seed=2))
        total = _latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: _stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
        wait_until(lambda: handoff_log.latest(None, tables, Status.CAUGHT_UP) is not None, proc, log,
                    what="CAUGHT_UP")
    finally:
        _stop(proc, log)
    statuses = [e.status for e in handoff_log.entries(None, tables)]
    assert statuses[:3] == ["BACKFILL_STARTED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED"]
    assert statuses[3:5] == ["STREAM_STARTED", "SWITCHED"] and statuses[-1] == "STOPPED"
    assert "CAUGHT_UP" in statuses
    updates = topic_config(bootstrap, PIPELINE.updates_topic)  # the newest state per key is all it must keep
    assert updates["cleanup.policy"] == "compact"
    assert_matches_oracle(spark, bootstrap, topic_name, tables)
    # the tables batches append to were compacted (a MERGE rewrites what it touches: `state` stays one file here)
    for path in (tables.windows, tables.stream_batches, tables.dead_letter, tables.late):
        assert any(h.get("operation") == "OPTIMIZE" for h in DeltaTable(path).history()), f"{path} not compacted"
    status = pipeline_status(tables, bootstrap)
    assert status["phase"] == "stopped" and status["offsets_behind"] == {str(p): 0 for p in range(4)}
    # each query's last batches, kept at the stop for where the time went
    recent = json.loads(storage.read_text(stream_dir(tables, handoff.handoff_id) / "recent_progress.json"))
    assert set(recent) == {"demo-keyed", "demo-events", "demo-state"}
    assert [b["batch_id"] for b in recent["demo-events"] if b["rows"]] == \
        [b.batch_id for b in stream_progress.batches(tables, handoff.handoff_id)]


def test_sigkill_and_restart_neither_loses_nor_double_counts(spark, bootstrap, topic_name, tmp_path):
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    handoff = handoff_log.latest(None, tables, Status.HANDOFF_COMMITTED)
    start = handoff_log.offsets(handoff)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, env=TIDY_EVERY_2)
    produce(bootstrap, topic_name, _tail_events(3, datetime(2026, 1, 2, 20), 200, seed=3))
    wait_until(lambda: len(event_batches(tables, handoff.handoff_id)) >= 1, proc, log, what="a first event batch")
    produce(bootstrap, topic_name, _tail_events(3, datetime(2026, 1, 3, 2), 150, seed=4))
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert "gone without a clean stop" in pipeline_status(tables)["phase"]

    produce(bootstrap, topic_name, _tail_events(3, datetime(2026, 1, 3, 6), 150, seed=5))
    proc = start_stream(tables, bootstrap, log, env=TIDY_EVERY_2)
    try:
        total = _latest_total(bootstrap, topic_name, start)
        wait_until(lambda: _stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
    finally:
        _stop(proc, log)
    entries = [e for e in handoff_log.entries(None, tables) if e.status == "STREAM_STARTED"]
    assert [handoff_log.details(e)["restart"] for e in entries] == [False, True]
    assert [e.status for e in handoff_log.entries(None, tables)].count("SWITCHED") == 1
    assert_matches_oracle(spark, bootstrap, topic_name, tables)


def test_handoff_refuses_offsets_no_longer_retained(spark, bootstrap, topic_name, tmp_path):
    from kafka import TopicPartition

    run_generate(bootstrap, topic_name, events=600, keys=10, partitions=2, days=1, seed=3, malformed_rate=0.0,
                 out=QUIET)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=0.5),
                out=lambda *_: None)
    result = run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    with admin_client(bootstrap) as admin:
        admin.delete_records({TopicPartition(topic_name, 1): result.boundary[1] + 20})
    before = handoff_log.entries(None, tables)
    with pytest.raises(UserError, match=r"partition 1 no longer retains offset .*extend the archive"):
        run_handoff(spark, PIPELINE, tables, bootstrap)
    assert len(handoff_log.entries(None, tables)) == len(before)
