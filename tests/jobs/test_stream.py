"""The switch end to end on the real broker: backfill, handoff, stream while events arrive, against the oracle."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream.updates_topic import last_started_with
from switchyard.state_handoff.control import details, handoff_log, lease, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep, fencing, storage
from switchyard.state_handoff.io.kafka_io import admin_client, produce, topic_config
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables
from tests.support.cli import cli_here
from tests.support.streams import (QUIET, assert_matches_oracle, event_batches, latest_total, start_stream, stop_stream,
                                   stream_read, stream_until_caught_up, tail_events, wait_until)

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]
TIDY_EVERY_2 = {delta_upkeep.EVERY_ENV: "2"}  # a killed stream restarts between compactions


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


def test_switch_to_stream_matches_oracle(spark, bootstrap, topic_name, tmp_path):
    """...with the stream's tables compacted after every batch (state_handoff/io/delta_upkeep.py; every 100th by
    default), while both Delta-writing queries write: nothing a batch wrote is lost to a compaction."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", add_partition=True)
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, env={delta_upkeep.EVERY_ENV: "1"})
    try:
        produce(bootstrap, topic_name, tail_events(4, datetime(2026, 1, 2, 20), 300, seed=1))
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, proc, log,
                    what="SWITCHED")
        second = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "stream", "--pipeline", "demo", "--warehouse",
                                 tables.warehouse, "--bootstrap", bootstrap], capture_output=True, text=True, cwd=ROOT)
        # not now (75): the lease is the first stream's; a standby that retries takes over once it is free
        assert second.returncode == 75 and "already running" in second.stderr and "Traceback" not in second.stderr
        produce(bootstrap, topic_name, tail_events(4, datetime(2026, 1, 3, 4), 200, seed=2))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, proc, log,
                    what="CAUGHT_UP")
    finally:
        stop_stream(proc, log)
    statuses = [e.status for e in handoff_log.entries(tables)]
    assert statuses[:3] == ["BACKFILL_STARTED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED"]
    assert statuses[3:5] == ["STREAM_STARTED", "SWITCHED"] and statuses[-1] == "STOPPED"
    assert "CAUGHT_UP" in statuses
    updates = topic_config(bootstrap, last_started_with(tables))  # the newest state per key is all it must keep
    assert updates["cleanup.policy"] == "compact"
    assert_matches_oracle(spark, bootstrap, topic_name, tables)
    # the tables batches append to were compacted (a MERGE rewrites what it touches: `state` stays one file here)
    for path in (tables.windows, tables.stream_batches, tables.dead_letter, tables.late):
        assert any(h.get("operation") == "OPTIMIZE" for h in DeltaTable(path).history()), f"{path} not compacted"
    status = pipeline_status(tables, bootstrap)
    assert status["phase"] == "stopped" and status["offsets_behind"] == {str(p): 0 for p in range(4)}
    assert status["state_updates_behind"] == 0  # the stop drained every update into `state`
    # each query's last batches, kept at the stop for where the time went
    recent = json.loads(storage.read_text(StreamPaths.of(tables, handoff.handoff_id).recent_progress))
    assert set(recent) == {"demo-keyed", "demo-events", "demo-state"}
    keyed = [b for b in recent["demo-keyed"] if b["rows"]]
    assert keyed and all(b["state_ms"]["commitTimeMs"] >= 0 and b["state_ms"]["rows"] > 0 for b in keyed), keyed
    assert [b["batch_id"] for b in recent["demo-events"] if b["rows"]] == \
        [b.batch_id for b in stream_progress.batches(tables, handoff.handoff_id)]


def test_sigkill_and_restart_neither_loses_nor_double_counts(spark, bootstrap, topic_name, tmp_path):
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    start = handoff_log.offsets(handoff)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, env=TIDY_EVERY_2)
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 200, seed=3))
    wait_until(lambda: len(event_batches(tables, handoff.handoff_id)) >= 1, proc, log, what="a first event batch")
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 2), 150, seed=4))
    time.sleep(2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert "gone without a clean stop" in pipeline_status(tables)["phase"]

    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 6), 150, seed=5))
    proc = start_stream(tables, bootstrap, log, env=TIDY_EVERY_2)
    try:
        total = latest_total(bootstrap, topic_name, start)
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
    finally:
        stop_stream(proc, log)
    entries = [e for e in handoff_log.entries(tables) if e.status == "STREAM_STARTED"]
    assert [details.of(e).restart for e in entries] == [False, True]
    assert [e.status for e in handoff_log.entries(tables)].count("SWITCHED") == 1
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
    before = handoff_log.entries(tables)
    with pytest.raises(UserError, match=r"partition 1 no longer retains offset .*extend the archive"):
        run_handoff(spark, PIPELINE, tables, bootstrap)
    assert len(handoff_log.entries(tables)) == len(before)


def _fence_history(path: str) -> list[tuple[str, int | None]]:
    """Each commit of the Delta table at `path` in order: its operation and the lease epoch it carried (its fence
    transaction, or for a compaction, whose commits keep no transaction, its commit info; None: neither)."""
    commits = []
    for file in sorted((Path(path) / "_delta_log").glob("*.json")):
        actions = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
        info = next(a["commitInfo"] for a in actions if "commitInfo" in a)
        fence = next((a["txn"]["version"] for a in actions if "txn" in a and a["txn"]["appId"] == fencing.FENCE_ID),
                     None)
        named = info.get(fencing.FENCE_ID)
        commits.append((info.get("operation"),
                        fencing.fenced_epoch(fence) if fence is not None else (int(named) if named else None)))
    return commits


def test_a_frozen_stream_taken_over_commits_nothing_after_the_takeover(spark, bootstrap, topic_name, tmp_path):
    """A live stream frozen by SIGSTOP (its JVM too) loses the pipeline to a second `switchyard stream` once its
    lease has expired and stayed unrenewed; woken, it stops on the lost lease, and no table the stream writes holds
    a commit of its epoch after the taker's fence. The taker's tables match the oracle."""
    env = {**TIDY_EVERY_2, lease.ENV: "10"}  # renewed every 1.7 s: a loaded machine still renews in time
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    frozen_log, taker_log = tmp_path / "frozen.log", tmp_path / "taker.log"
    frozen = start_stream(tables, bootstrap, frozen_log, env=env)
    taker = None
    try:
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 200, seed=3))
        wait_until(lambda: len(event_batches(tables, handoff.handoff_id)) >= 1, frozen, frozen_log,
                   what="a first event batch")
        frozen_epoch = lease.latest_row(tables.leases).epoch
        os.killpg(frozen.pid, signal.SIGSTOP)
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 2), 150, seed=4))
        deadline = time.monotonic() + 60
        while lease.owner(tables) is not None:  # a second stream is refused while the row is unexpired
            assert time.monotonic() < deadline, "the frozen stream's lease never expired"
            time.sleep(0.5)
        taker = start_stream(tables, bootstrap, taker_log, env=env)
        wait_until(lambda: [e.status for e in handoff_log.entries(tables)].count(Status.STREAM_STARTED) == 2,
                   taker, taker_log, what="the taker's STREAM_STARTED")
        taker_epoch = lease.latest_row(tables.leases).epoch
        assert taker_epoch > frozen_epoch

        os.killpg(frozen.pid, signal.SIGCONT)
        assert frozen.wait(timeout=180) != 0
        assert "lease" in frozen_log.read_text(), frozen_log.read_text()[-3000:]
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 6), 150, seed=5))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, taker, taker_log, what=f"{total} tail records read")
    finally:
        if frozen.poll() is None:
            os.killpg(frozen.pid, signal.SIGCONT)
            os.killpg(frozen.pid, signal.SIGKILL)
            frozen.wait(timeout=60)
        if taker is not None:
            stop_stream(taker, taker_log)
    written = [name for name in fencing.FENCED if (Path(tables.path(name)) / "_delta_log").exists()]
    assert {"handoffs", "stream_batches", "state", "tiles", "dead_letter"} <= set(written), written
    for name in written:
        commits = _fence_history(tables.path(name))
        epochs = [epoch for _, epoch in commits]
        assert taker_epoch in epochs, (name, commits)
        after = commits[epochs.index(taker_epoch):]
        assert all(epoch == taker_epoch for _, epoch in after), (name, after)
    assert_matches_oracle(spark, bootstrap, topic_name, tables)


def test_a_batch_another_driver_planned_in_the_checkpoint_is_run_not_fatal(spark, bootstrap, topic_name, tmp_path):
    """A stream that lost the lease and woke may plan its next batch in the shared checkpoint before it learns it
    lost (a race the frozen-stream test meets only under load). Here that other driver's plan is written into the
    events checkpoint's offset log by hand while the stream idles: the stream's next plan meets it
    (CONCURRENT_STREAM_LOG_UPDATE), it starts its queries again from the checkpoint, runs the planned batch, and
    ends equal to the oracle."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    offsets = Path(StreamPaths.of(tables, handoff.handoff_id).events_checkpoint) / "offsets"
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 200, seed=3))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
        planned = max(int(f.name) for f in offsets.iterdir() if f.name.isdigit())
        (offsets / str(planned + 1)).write_text((offsets / str(planned)).read_text())  # the other driver's plan
        produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 2), 150, seed=4))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
    finally:
        stop_stream(proc, log)
    assert "starting the queries again from the checkpoint" in log.read_text()
    assert_matches_oracle(spark, bootstrap, topic_name, tables)


def test_switchyard_stop_reaches_a_stream_on_another_host_through_the_log(spark, bootstrap, topic_name, tmp_path):
    """`switchyard stop` needs no pid, host or signal: run as if on another host, it appends STOP_REQUESTED and the
    stream, in its own process group, drains, logs STOPPED naming the request, and exits 0."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", events=600)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, proc, log, what="SWITCHED")
        elsewhere = ("import socket, sys\nsocket.gethostname = lambda: 'another-host'\n"
                     "from switchyard.jobs.cli.parser import main\n"
                     f"sys.exit(main(['stop', '--pipeline', 'demo', '--warehouse', {tables.warehouse!r}]))\n")
        stop = subprocess.run([sys.executable, "-c", elsewhere], capture_output=True, text=True, cwd=ROOT,
                              timeout=300)
        assert stop.returncode == 0, stop.stdout + stop.stderr + log.read_text()[-3000:]
        assert "STOPPED at" in stop.stdout
        assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
    entries = handoff_log.entries(tables)
    asked = next(e for e in entries if e.status == Status.STOP_REQUESTED)
    assert requests.read(asked).host == "another-host"
    assert entries[-1].status == Status.STOPPED and entries[-1].seq > asked.seq
    assert "STOP_REQUESTED by switchyard stop" in details.of(entries[-1]).reason


def test_checkpoints_another_spark_line_wrote_are_rebased_not_resumed(spark, bootstrap, topic_name, tmp_path):
    """A handoff whose stream last started under another Spark line (as after an upgrade) and was killed is not
    resumed from its checkpoints: `switchyard stream` refuses in one line naming `switchyard rebase`, which (its
    stream refusing to catch up first) moves the pipeline to a new handoff with new checkpoints, and the stream then
    ends where plain Python does over every record."""
    from tests.support import oracle

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", events=1200)
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 150, seed=6))
    stream_until_caught_up(spark, tables, bootstrap)
    started = handoff_log.latest(tables, Status.STREAM_STARTED)
    assert details.of(started).spark_version == spark.version
    # what the log holds when another line's stream started the handoff last and was killed (no STOPPED)
    handoff_log.append(tables, handoff.handoff_id, Status.STREAM_STARTED,
                       details=dataclasses.replace(details.of(started), spark_version="3.5.1"))
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 2), 150, seed=7))

    code, out = cli_here(tables, bootstrap, "stream", "--until-caught-up")
    assert code == 2 and out.count("\n") == 1, out
    assert "written by Spark 3.5.1" in out and "`switchyard rebase --pipeline demo`" in out
    code, out = cli_here(tables, bootstrap, "rebase")  # the killed stream cannot be streamed until caught up first:
    assert code == 0, out[-3000:]                       # the rebase goes on
    assert "the stream did not catch up (the stream checkpoints of handoff" in out, out
    new = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    assert new.handoff_id != handoff.handoff_id
    stream_until_caught_up(spark, tables, bootstrap)

    expected = oracle.backlog(oracle.read_topic(bootstrap, topic_name))
    state = {r["key"]: r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert {k: (s["event_count"], s["amount_min"], s["amount_max"]) for k, s in state.items()} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.state.items()}
    dead = DeltaTable(tables.dead_letter).to_pyarrow_table().num_rows
    assert dead == len(expected.dead_letter) > 0


def test_a_sigterm_while_the_stream_starts_its_jvm_ends_it_cleanly_with_nothing_started(spark, bootstrap, topic_name,
                                                                                      tmp_path):
    """`serve` may stop its stream at any moment: a SIGTERM once the stream holds the lease, while its JVM starts, is
    obeyed (exit 0, no query started, nothing logged), not the end of the process by the signal."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", partitions=2, events=600)
    before = handoff_log.entries(tables)
    proc = subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", "stream", "--pipeline", "demo",
                             "--warehouse", tables.warehouse, "--bootstrap", bootstrap], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"})
    deadline = time.monotonic() + 60
    while lease.owner(tables) is None and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert lease.owner(tables) is not None, "the stream took the lease"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=180)
    assert proc.returncode == 0, out[-3000:]
    assert "SIGTERM before the queries started" in out, out[-3000:]
    assert handoff_log.entries(tables) == before, "nothing started, nothing logged"
    assert lease.owner(tables) is None
