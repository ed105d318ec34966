"""Every named crash point (SWITCHYARD_FAULT): die there as a SIGKILL would, run the same step again without the
fault, finish the pipeline, and the end result equals the oracle exactly."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from datetime import datetime
from pathlib import Path

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import StreamOptions, run_stream
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream.layout import stream_dir
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows
from tests.support.streams import assert_matches_oracle, tail_events

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]
PER_TRIGGER = 300  # two batches over the pre-produced tail (557 records), so a crash can land in a later one
STREAM_FLAGS = ["--caught-up-lag", "0", "--max-offsets-per-trigger", str(PER_TRIGGER),
                "--tables-trigger-seconds", "1"]


@pytest.fixture(scope="module")
def pipeline_stages(spark, bootstrap, tmp_path_factory):
    """One topic (archived 60%, then a tail with late and malformed records) and the warehouse after each stage:
    archived, backfilled, handed off (and the archived records, for the backfill's oracle). A test copies the stage
    it starts from."""
    topic = f"t.crash.{uuid.uuid4().hex[:8]}"
    root = tmp_path_factory.mktemp("crash-stages")
    quiet = open(os.devnull, "w")
    run_generate(bootstrap, topic, events=1200, keys=20, partitions=2, days=2, seed=21, malformed_rate=0.03, out=quiet)
    tables = Tables(str(root / "work"), PIPELINE.name)
    stages = {}
    cut = archive_cut(bootstrap, topic, fraction=0.6)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, cut, out=lambda *_: None)
    stages["archived_records"] = [r for r in oracle.read_topic(bootstrap, topic) if r.offset < cut[r.partition][1]]
    produce(bootstrap, topic, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=21))
    for stage, step in (("archived", None),
                        ("backfilled", lambda: run_backfill(spark, PIPELINE, tables, out=lambda *_: None)),
                        ("handed_off", lambda: run_handoff(spark, PIPELINE, tables, bootstrap))):
        if step:
            step()
        stages[stage] = root / stage
        shutil.copytree(tables.warehouse, stages[stage])
    return topic, stages


def _copy(stages: dict, stage: str, tmp_path: Path) -> Tables:
    shutil.copytree(stages[stage], tmp_path / "wh")
    return Tables(str(tmp_path / "wh"), PIPELINE.name)


def _marked_processes(mark: str) -> list[int]:
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/environ", "rb") as fh:
                    if f"SWITCHYARD_TEST_MARK={mark}".encode() in fh.read():
                        alive.append(int(entry))
            except OSError:
                continue
    return alive


def crash(point: str, command: list[str], tables: Tables, bootstrap: str, log: Path) -> None:
    """Run a `switchyard` command with the fault armed; it must die by SIGKILL, its JVM and workers with it."""
    mark = uuid.uuid4().hex
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", faults.ENV: point, "SWITCHYARD_TEST_MARK": mark}
    with open(log, "a") as out:
        proc = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *command, "--pipeline", PIPELINE.name,
                               "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
                              stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=env, timeout=400)
    assert proc.returncode == -signal.SIGKILL, f"{point}: exit {proc.returncode}\n{log.read_text()[-3000:]}"
    # a SIGKILL is delivered at once but a JVM's many threads take a moment to exit: allow the kernel a few seconds
    deadline = time.monotonic() + 5
    while (alive := _marked_processes(mark)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert alive == [], f"{point}: the JVM or a worker outlived the crash"


def finish_stream(spark, tables: Tables, bootstrap: str) -> None:
    run_stream(spark, PIPELINE, tables, bootstrap,
               StreamOptions(until_caught_up=True, caught_up_lag=0, max_offsets_per_trigger=PER_TRIGGER,
                              tables_trigger_seconds=1), out=lambda *_: None)


def _statuses(tables: Tables) -> list[str]:
    return [e.status for e in handoff_log.entries(tables)]


@pytest.mark.parametrize("point", ["backfill.after_tiles", "backfill.after_state"])
def test_backfill_crash_then_rerun(spark, bootstrap, pipeline_stages, tmp_path, point):
    """The rerun's commit equals the oracle's backlog; from a committed backfill on, the stream's crash points
    below carry the check to the end of the tail."""
    _, stages = pipeline_stages
    tables = _copy(stages, "archived", tmp_path)
    crash(point, ["backfill"], tables, bootstrap, tmp_path / "crash.log")
    assert _statuses(tables) == ["BACKFILL_STARTED"]  # died before BACKFILL_COMMITTED, and wrote no FAILED
    result = run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    expected = oracle.backlog(stages["archived_records"])
    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    dead = rows(spark, tables.dead_letter)
    assert max(Counter((r.kafka_partition, r.kafka_offset) for r in dead).values()) == 1, "a dead letter twice"
    assert {(r.kafka_partition, r.kafka_offset): r.reason for r in dead} == expected.dead_letter
    assert result.backlog_watermark == expected.backlog_watermark
    assert result.accounting == {p: {"read": expected.read[p], "well_formed": expected.well_formed[p],
                                     "dead_lettered": expected.read[p] - expected.well_formed[p]}
                                 for p in expected.read}
    assert _statuses(tables) == ["BACKFILL_STARTED", "BACKFILL_STARTED", "BACKFILL_COMMITTED"]
    assert not run_handoff(spark, PIPELINE, tables, bootstrap).reused


def test_handoff_crash_then_rerun(spark, bootstrap, pipeline_stages, tmp_path):
    topic, stages = pipeline_stages
    tables = _copy(stages, "backfilled", tmp_path)
    crash("handoff.before_log", ["handoff"], tables, bootstrap, tmp_path / "crash.log")
    assert Status.HANDOFF_COMMITTED not in _statuses(tables)
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)
    assert not handoff.reused
    finish_stream(spark, tables, bootstrap)
    assert_matches_oracle(spark, bootstrap, topic, tables)


STREAM_POINTS = [
    "stream.after_seed",
    "stream.keyed.after_send",             # the first keyed batch: it carries the seed
    "stream.events.after_dead_letter",
    "stream.events.after_window_merge:2",  # a later batch: its watermark comes back from Delta
    "stream.events.after_finalize_append",
    "stream.events.after_progress:2",
    "stream.state.after_merge",
]


@pytest.mark.parametrize("point", STREAM_POINTS)
def test_stream_crash_then_restart(spark, bootstrap, pipeline_stages, tmp_path, point):
    topic, stages = pipeline_stages
    tables = _copy(stages, "handed_off", tmp_path)
    crash(point, ["stream", *STREAM_FLAGS, "--for", "300"], tables, bootstrap, tmp_path / "crash.log")
    finish_stream(spark, tables, bootstrap)
    statuses = _statuses(tables)
    assert statuses.count("SWITCHED") == 1 and "FAILED" not in statuses and statuses[-1] == "STOPPED"
    assert_matches_oracle(spark, bootstrap, topic, tables)


def test_lost_checkpoint_is_refused_not_replayed(spark, bootstrap, pipeline_stages, tmp_path):
    topic, stages = pipeline_stages
    tables = _copy(stages, "handed_off", tmp_path)
    finish_stream(spark, tables, bootstrap)
    handoff_id = handoff_log.latest(tables, Status.HANDOFF_COMMITTED).handoff_id
    checkpoints = stream_dir(tables, handoff_id) / "checkpoints"
    before = _statuses(tables)
    for query in ("events", "keyed"):
        kept = tmp_path / f"{query}-kept"
        shutil.move(checkpoints / query, kept)
        with pytest.raises(UserError, match=rf"the {query} checkpoint of handoff {handoff_id} .* is missing, but "
                                            r"Delta already holds .* start over with `switchyard backfill`") as err:
            finish_stream(spark, tables, bootstrap)
        assert "\n" not in str(err.value) and "remove" not in str(err.value)
        shutil.move(kept, checkpoints / query)
    assert _statuses(tables) == before  # refused before anything was written
    finish_stream(spark, tables, bootstrap)  # the real checkpoint back: it resumes, nothing new to read
    assert_matches_oracle(spark, bootstrap, topic, tables)


def test_unknown_crash_point_is_a_one_line_error(tmp_path):
    env = {**os.environ, faults.ENV: "stream.nowhere"}
    proc = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "status", "--pipeline", "demo", "--warehouse",
                           str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{faults.ENV} must be `point[:n][:fail]`" in proc.stderr
    assert "not 'stream.nowhere'" in proc.stderr
    assert all(point in proc.stderr for point in faults.POINTS)


def test_broker_down_for_30s_mid_stream(spark, broker, bootstrap, pipeline_stages, tmp_path):
    """The monitor's Kafka calls fail soft while the broker is away; the queries ride it out or the stream stops
    with FAILED (exit 1) and resumes cleanly. Either way the oracle matches. Runs last: it adds to the topic."""
    from switchyard.deploy import kafka_broker
    from switchyard.state_handoff.control.status import pipeline_status
    from tests.support.streams import event_batches, start_stream, wait_until

    topic, stages = pipeline_stages
    tables = _copy(stages, "handed_off", tmp_path)
    handoff_id = handoff_log.latest(tables, Status.HANDOFF_COMMITTED).handoff_id
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, *STREAM_FLAGS[2:])
    try:
        wait_until(lambda: len(event_batches(tables, handoff_id)) >= 1, proc, log, what="a first events batch")
        kafka_broker.stop(broker)
        try:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and proc.poll() is None:
                time.sleep(1)
            if proc.poll() is None:  # still up after 30 s without a broker: status says the lag is unknown
                assert pipeline_status(tables).get("lag_error"), log.read_text()[-3000:]
        finally:
            kafka_broker.start(broker)
        produce(bootstrap, topic, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=22))
        if proc.poll() is not None:  # it stopped with FAILED: the same command resumes it
            assert proc.returncode == 1, log.read_text()[-3000:]
            assert _statuses(tables)[-1] == "FAILED"
            proc = start_stream(tables, bootstrap, log, *STREAM_FLAGS[2:])
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None
                   and _all_read(tables, bootstrap, topic), proc, log, what="every tail record read", timeout=400)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert_matches_oracle(spark, bootstrap, topic, tables)


def _all_read(tables: Tables, bootstrap: str, topic: str) -> bool:
    from switchyard.state_handoff.control.status import pipeline_status
    from switchyard.state_handoff.io.kafka_io import offset_bounds

    start = handoff_log.offsets(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    total = sum(hi - start.get(p, 0) for p, (_, hi) in offset_bounds(bootstrap, topic).items())
    read = sum(a["read"] for a in (pipeline_status(tables).get("stream_accounting") or {}).values())
    return read >= total
