"""The stream as the user runs it: `switchyard stream` in its own process, watched until a condition holds; the
events a test sends past the backlog, and the whole switch checked against the oracle."""

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

from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows

ROOT = Path(__file__).resolve().parents[2]
QUIET = open(os.devnull, "w")  # where a generator run in a test prints its progress


def stream_until_caught_up(spark, tables: Tables, bootstrap: str):
    """`switchyard stream --until-caught-up` run in the test's session, not a process of its own (a JVM's start
    would cost more than the stream): where a test only needs the pipeline streamed on. The session's settings are
    the same after it as before, as a library's caller needs them."""
    from switchyard.jobs.stream import StreamOptions, run_stream
    from switchyard.state_handoff.language.pipelines import get_pipeline

    before = spark.conf.getAll
    result = run_stream(spark, get_pipeline(tables.pipeline), tables, bootstrap,
                        StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1),
                        out=lambda *_: None)
    changed = {k: (before.get(k), v) for k, v in spark.conf.getAll.items() if before.get(k) != v}
    assert changed == {} and set(before) <= set(spark.conf.getAll), f"the stream left the session changed: {changed}"
    return result


def start_stream(tables: Tables, bootstrap: str, log: Path, *flags: str, env: dict | None = None,
                 pipeline: str | None = None) -> subprocess.Popen:
    """`switchyard stream` of `tables`' pipeline (or `pipeline`: a `module:attribute` reference to a definition of
    it) in its own process."""
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", **({"PYTHONPATH": str(ROOT)} if pipeline else {}),
           **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "stream", "--pipeline", pipeline or tables.pipeline,
         "--warehouse", tables.warehouse,
         "--bootstrap", bootstrap, "--caught-up-lag", "0", *flags],
        stdout=open(log, "a"), stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)


class LaunchedStream:
    """A stream process Dagster launched from this test process (a detached run returns without a handle to it):
    watched and reaped through its pid, as a `subprocess.Popen` would be."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"stream process {self.pid}", timeout)
            time.sleep(0.5)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def wait_until(condition, proc: subprocess.Popen | LaunchedStream, log: Path, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"stream exited with {proc.returncode} while waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def event_batches(tables: Tables, handoff_id: str) -> list[dict[int, dict]]:
    """The stream's committed events batches in order, per partition what each read (from `stream_batches`)."""
    batches = stream_progress.batches(tables, handoff_id)
    assert [b.batch_id for b in batches] == list(range(len(batches))), "a batch is missing or repeated"
    assert len({b.incarnation for b in batches}) <= 1, "batches from two checkpoints"
    return [{int(p): v for p, v in b.partitions.items()} for b in batches]


def tail_events(topic_partitions: int, start: datetime, count: int, seed: int) -> list[tuple]:
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


def stream_read(tables: Tables) -> int:
    return sum(p["read"] for p in (pipeline_status(tables).get("stream_accounting") or {}).values())


def latest_total(bootstrap, topic, start: dict[int, int]) -> int:
    from switchyard.state_handoff.io.kafka_io import offset_bounds

    return sum(hi - start.get(p, 0) for p, (_, hi) in offset_bounds(bootstrap, topic).items())


def batch_ends(tables: Tables, handoff_id: str) -> list[dict[int, int]]:
    return [{p: v["last_offset"] for p, v in b.items()} for b in event_batches(tables, handoff_id)]


def stop_stream(proc: subprocess.Popen, log: Path) -> None:
    os.kill(proc.pid, signal.SIGTERM)  # the CLI process only: it stops its queries and logs STOPPED
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]


def assert_matches_oracle(spark, bootstrap, topic, tables: Tables):
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    start = handoff_log.offsets(handoff)
    records = oracle.read_topic(bootstrap, topic)
    archived = [r for r in records if r.offset < start.get(r.partition, 0)]
    tail = [r for r in records if r.offset >= start.get(r.partition, 0)]
    expected = oracle.through_stream(archived, tail, batch_ends(tables, handoff.handoff_id))

    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    late = {(r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.late)}
    assert late == expected.late and len(expected.late) >= 12
    dead = {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)}
    assert dead == expected.dead_letter
    # the accounting identity per partition over both phases: nothing vanished, nothing counted twice
    committed = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED))
    backfill = {p: dict(a) for p, a in committed.accounting.items()}
    for p, a in (committed.kafka_tail or {}).get("accounting", {}).items():  # the backfill's Kafka tail
        b = backfill.setdefault(p, {"read": 0, "well_formed": 0, "dead_lettered": 0})
        for name in ("read", "well_formed", "dead_lettered"):
            b[name] += a[name]
    status = pipeline_status(tables)
    for p in expected.read:
        b = backfill.get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        s = status["stream_accounting"].get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        assert b["read"] + s["read"] == expected.read[p]
        assert b["well_formed"] + s["well_formed"] == expected.well_formed[p]
        assert b["read"] + s["read"] == b["well_formed"] + s["well_formed"] + b["dead_lettered"] + s["dead_lettered"]
    assert sum(r.event_count for r in rows(spark, tables.state)) == sum(expected.well_formed.values())
    return expected


def switch_half_archived(spark, pipeline, tables: Tables, bootstrap: str, topic: str, tail_seed: int) -> None:
    """The whole switch over a generated topic: half of it archived, backfilled and handed off, 40 more records
    produced, streamed to caught up, and every table checked against the oracle."""
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.state_handoff.io.kafka_io import produce

    run_archive(spark, pipeline, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.5),
                out=lambda *_: None)
    run_backfill(spark, pipeline, tables, out=lambda *_: None)
    run_handoff(spark, pipeline, tables, bootstrap)
    produce(bootstrap, topic, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=tail_seed))
    assert stream_until_caught_up(spark, tables, bootstrap).reason == "caught up"
    assert_matches_oracle(spark, bootstrap, topic, tables)
