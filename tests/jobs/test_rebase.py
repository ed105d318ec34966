"""The way back: a live stream rebased at a cut by a backfill under it (and on demand), against the oracle,
with the invariants that must hold across any number of handoffs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import datetime
from pathlib import Path

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, handoff_log, lease, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.io.kafka_io import offset_bounds, produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.layout import stream_dir
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import (assert_state_matches, assert_updates_topic_matches_state,
                                   assert_windows_match, key_of_row, rows)
from tests.support.streams import event_batches, start_stream, tail_events, wait_until

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]
FLAGS = ("--max-offsets-per-trigger", "400", "--tables-trigger-seconds", "1")  # the tail in two batches


def _prepare(spark, bootstrap, topic, warehouse) -> Tables:
    run_generate(bootstrap, topic, events=1200, keys=20, partitions=2, days=2, seed=31, malformed_rate=0.03,
                 out=open(os.devnull, "w"))
    tables = Tables(str(warehouse), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.5),
                out=lambda *_: None)
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    return tables


def _cli(tables: Tables, bootstrap: str, *args: str, env: dict | None = None, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", *args, "--pipeline", PIPELINE.name,
                             "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
                            cwd=ROOT, env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def _handoffs(tables: Tables) -> list:
    return [e for e in handoff_log.entries(tables) if e.status == Status.HANDOFF_COMMITTED]


def _caught_up_on(tables: Tables, handoff_id: str) -> bool:
    return handoff_log.latest(tables, Status.CAUGHT_UP, handoff_id=handoff_id) is not None


def _count(tables: Tables, status: str) -> int:
    return sum(e.status == status for e in handoff_log.entries(tables))


def _owned_by(tables: Tables, pid: int) -> bool:
    owner = lease.owner(tables)
    return owner is not None and owner.owner_pid == pid


def _read_everything(tables: Tables, bootstrap: str, topic: str) -> bool:
    """Every record from the first handoff's start was read by some handoff's events path."""
    first = handoff_log.offsets(_handoffs(tables)[0])
    total = sum(hi - first.get(p, 0) for p, (_, hi) in offset_bounds(bootstrap, topic).items())
    read = sum(sum(v["read"] for v in b.partitions.values())
               for h in _handoffs(tables) for b in stream_progress.batches(tables, h.handoff_id))
    return read >= total


def assert_exact_across_handoffs(spark, bootstrap, topic, tables: Tables, backlog_to: int = 0,
                                 window=oracle.WINDOW, lateness=oracle.LATENESS, renamed: dict | None = None,
                                 keys: tuple[str, ...] = ("key",), classified=oracle.classify):
    """The oracle sees one continuous stream from the first handoff: each later handoff starts at the cut where
    the previous one's events path ended, with the watermark it left. `backlog_to`: the index of the handoff whose
    cut ends the backlog instead (a redeploy made the windows, of `window` and `lateness`, again there); `renamed`:
    state columns a redeploy renamed, by the demo's name; `keys`: the key's fields (a redeploy to another key);
    `classified`: how the oracle parses a value (a redeploy whose records parse otherwise, over all history)."""
    handoffs = _handoffs(tables)
    first = handoff_log.offsets(handoffs[backlog_to])
    batches = []
    for h in handoffs[backlog_to:]:
        batches += [{p: v["last_offset"] for p, v in b.items()} for b in event_batches(tables, h.handoff_id)]
    for previous, h in zip(handoffs, handoffs[1:]):
        ends = {p: o + 1 for b in event_batches(tables, previous.handoff_id) for p, o in
                ((p, v["last_offset"]) for p, v in b.items())}
        start = handoff_log.offsets(h)
        began = handoff_log.offsets(previous)
        assert all(start[p] >= ends.get(p, began.get(p, 0)) for p in start), "a cut before what was streamed"
    records = oracle.read_topic(bootstrap, topic)
    archived = [r for r in records if r.offset < first.get(r.partition, 0)]
    tail = [r for r in records if r.offset >= first.get(r.partition, 0)]
    key_of = oracle.by_key if keys == ("key",) else (lambda event: tuple(getattr(event, k) for k in keys))
    expected = oracle.through_stream(archived, tail, batches, window, lateness, key_of, classified)

    assert_state_matches(spark, tables, expected, renamed, keys)
    assert_windows_match(spark, tables.windows, expected.final_windows(), window, keys)
    assert_windows_match(spark, tables.window_state, expected.open_windows(), window, keys)
    late = Counter((r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.late))
    dead = Counter((r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.dead_letter))
    assert max(late.values()) == 1 and max(dead.values()) == 1, "a record late or dead-lettered twice"
    assert set(late) == expected.late and not set(late) & set(dead)
    assert set(dead) == set(expected.dead_letter)
    # each well-formed record counts in exactly one of windows, window_state or late
    in_windows = sum(r.event_count for path in (tables.windows, tables.window_state) for r in rows(spark, path))
    assert in_windows + len(late) == sum(expected.well_formed.values())
    final = Counter((key_of_row(r, keys), r.window_start) for r in rows(spark, tables.windows))
    assert max(final.values()) == 1, "a window final twice"
    assert_updates_topic_matches_state(spark, bootstrap, tables, keys)
    return expected


def test_a_backfill_under_a_live_stream_then_a_burst_rebase_it(spark, bootstrap, topic_name, tmp_path):
    """Both ways back to the batch path, one live stream: the daily backfill under it rebases it at a cut; then
    offsets behind above --switch-back-lag for --switch-back-after seconds make it rebase itself, logging the
    decision with its figures. The same process goes on from each cut; the oracle matches across the three
    handoffs. (One test, so the suite starts this stream once.)"""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    first = _handoffs(tables)[0]
    log = tmp_path / "stream.log"
    # the threshold sits above the un-archived half of the backlog (~700 records) the stream starts behind
    # decided by lag alone (SWITCHYARD_SWITCH_BACK=lag): by cost, a stream held to 100 offsets a batch drains the
    # burst in about the time a rebase's estimate takes, either way (the decision by cost: test_lag_decisions.py)
    proc = start_stream(tables, bootstrap, log, "--max-offsets-per-trigger", "100", "--tables-trigger-seconds", "1",
                        "--switch-back-lag", "1200", "--switch-back-after", "2", env={"SWITCHYARD_SWITCH_BACK": "lag"})
    try:
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 80, seed=31))
        wait_until(lambda: len(event_batches(tables, first.handoff_id)) >= 2, proc, log, what="two events batches")
        # the archive grows over records the stream already processed; the daily backfill runs under it
        run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=0.8),
                    out=lambda *_: None)
        refused = _cli(tables, bootstrap, "backfill", "--no-rebase")
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode == 2 and out.count("\n") == 1 and "switchyard stream" in out, out
        backfill = _cli(tables, bootstrap, "backfill")
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=32))
        out, _ = backfill.communicate(timeout=600)
        assert backfill.returncode == 0, out + log.read_text()[-3000:]
        assert "SWITCHED" in out and proc.poll() is None, "the same stream process goes on"
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=33))
        wait_until(lambda: _read_everything(tables, bootstrap, topic_name), proc, log, what="every record read")
        assert len(_handoffs(tables)) == 2, "no switch back while the stream keeps up"
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 8), 2500, seed=36))  # the burst
        wait_until(lambda: len(_handoffs(tables)) == 3 and _caught_up_on(tables, _handoffs(tables)[-1].handoff_id)
                   and _read_everything(tables, bootstrap, topic_name), proc, log,
                   what="a switch back, then caught up", timeout=600)
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    statuses = [e.status for e in handoff_log.entries(tables)]
    rebase_steps = statuses[statuses.index("REBASE_REQUESTED"):]
    assert [s for s in rebase_steps if s in ("PAUSED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED", "SWITCHED")][:8] \
        == ["PAUSED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED", "SWITCHED"] * 2, statuses
    assert statuses.count("STREAM_STARTED") == 3 and statuses[-1] == "STOPPED"
    entries = handoff_log.entries(tables)
    for paused, committed in zip([e for e in entries if e.status == Status.PAUSED],
                                 [e for e in entries if e.status == Status.HANDOFF_COMMITTED][1:]):
        # the rebase's own seconds run after the pause: each step counted once
        assert 0 < details.of(committed).rebase_s <= (committed.at - paused.at).total_seconds() + 1
    asked = [requests.as_details(requests.read(e)) for e in entries if e.status == Status.REBASE_REQUESTED]
    assert [r["reason"] for r in asked] == ["backfill", "switch back"], asked
    assert asked[1]["behind"] > 1200 and asked[1]["behind_for_s"] >= 2
    assert len(_handoffs(tables)) == 3, "hysteresis: one switch back for one burst"
    # the switch back tiled no day: its commit started from the backfill's merge of the tiles and kept it as it was
    merges = [details.of(e).backlog for e in entries if e.status == Status.BACKFILL_COMMITTED][-2:]
    assert merges[0]["table"] == merges[1]["table"] == "backlog" and merges[0]["version"] == merges[1]["version"]
    assert f"the tiles' merge kept from the earlier commit (backlog version {merges[0]['version']})" \
        in log.read_text(), log.read_text()[-3000:]
    status = pipeline_status(tables)
    assert status["rebases"] == 2 and status["last_reconciliation_keys_different"] == 0
    assert status["handoff_id"] == _handoffs(tables)[-1].handoff_id != first.handoff_id
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    # the live handoff pruned what the earlier two needed to run (their seeds and checkpoints), and only that
    for h in _handoffs(tables):
        folder = stream_dir(tables, h.handoff_id)
        live = h.handoff_id == status["handoff_id"]
        assert all(os.path.isdir(folder / part) == live for part in ("seed", "checkpoints")), h.handoff_id
        assert os.path.isfile(folder / "progress.json"), h.handoff_id  # the cache for status stays


def test_rebase_survives_its_crash_points(spark, bootstrap, topic_name, tmp_path):
    """`rebase` on demand; the stream dies after the pause, then after the rebase's backfill; each restart
    finishes what the log says was begun."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=34))
    log = tmp_path / "stream.log"
    for point in ("rebase.after_pause", "rebase.after_backfill"):
        caught_up_before = _count(tables, Status.CAUGHT_UP)
        proc = start_stream(tables, bootstrap, log, *FLAGS, env={faults.ENV: point})
        # this process's CAUGHT_UP, not the last one's: a `rebase` asked before the stream holds the lease would
        # find no stream live and rebase by itself
        wait_until(lambda: _owned_by(tables, proc.pid) and _count(tables, Status.CAUGHT_UP) > caught_up_before
                   and _read_everything(tables, bootstrap, topic_name), proc, log, what="caught up")
        requester = _cli(tables, bootstrap, "rebase", "--timeout", "900")
        assert proc.wait(timeout=600) == -signal.SIGKILL, log.read_text()[-3000:]
        proc = start_stream(tables, bootstrap, log, *FLAGS)  # finishes the rebase, then streams
        out, _ = requester.communicate(timeout=900)
        assert requester.returncode == 0, out + log.read_text()[-3000:]
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 4), 30, seed=35 + len(point)))
        wait_until(lambda: _read_everything(tables, bootstrap, topic_name), proc, log, what="every record read")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert len(_handoffs(tables)) == 3 and pipeline_status(tables)["last_reconciliation_keys_different"] == 0
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
