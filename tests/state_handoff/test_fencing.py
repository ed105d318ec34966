"""Fencing: an owner frozen while it holds the pipeline is taken over, and when it wakes nothing it commits lands,
even a commit it had checked and was about to make; the taker's commits go on. Real Delta tables, a real second
process, SIGSTOP for the freeze."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from switchyard.jobs.delta_txn import append_arrow_once
from switchyard.state_handoff.control import handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[2]
LEASE_SECONDS = "2"


def _warehouse(tmp_path: Path, kind: str) -> str:
    """A plain warehouse path, or one spelled as teams' paths are: through a symlinked folder whose name has a
    space, into one whose name has a non-ASCII letter (delta-rs names such a table by its resolved, percent-encoded
    URI)."""
    if kind == "plain":
        return str(tmp_path / "wh")
    (tmp_path / "real").mkdir()
    (tmp_path / "Data Team").symlink_to(tmp_path / "real", target_is_directory=True)
    return str(tmp_path / "Data Team" / "wärehouse")


@pytest.fixture(params=["plain"])
def tables(request, tmp_path, monkeypatch) -> Tables:
    monkeypatch.setenv(lease.ENV, LEASE_SECONDS)
    tables = Tables(_warehouse(tmp_path, request.param), "demo")
    write_deltalake(tables.late, pa.table({"n": pa.array([], pa.int64())}))
    return tables


ANY_PATH = pytest.mark.parametrize("tables", ["plain", "symlinked"], indirect=True)


def _commits(path: str) -> list[dict]:
    """Each commit of the table at `path`: its version, the files it added, the app transactions it recorded, its
    operation and the lease epoch its info names."""
    log = Path(path) / "_delta_log"
    commits = []
    for file in sorted(log.glob("*.json")):
        actions = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
        info = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
        commits.append({"version": int(file.stem), "adds": sum("add" in a for a in actions),
                        "txns": {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a},
                        "operation": info.get("operation"), "epoch": info.get(fencing.FENCE_ID)})
    return commits


def _owner(tables: Tables) -> subprocess.Popen:
    """A process that holds the pipeline and, on each line it reads, appends one row to `late`: `write` through the
    fenced idempotent append, `checked` by passing the fence's checks and then waiting for one more line before its
    commit (a process frozen between its check and its commit)."""
    code = f"""
import sys
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from switchyard.jobs.delta_txn import append_arrow_once
from switchyard.state_handoff.control import lease
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.tables import Tables
lease.FRESH_PART = 100.0  # its own clock never stops it (on a loaded machine it would, at any step): the fence must
tables = Tables({tables.warehouse!r}, {tables.pipeline!r})
with lease.hold(tables, lease.STREAM) as held:
    print("held", held.epoch, flush=True)
    n = 0
    for line in sys.stdin:
        n += 1
        table = DeltaTable(tables.late)
        try:
            if line.strip() == "write":
                append_arrow_once(table, pa.table({{"n": [n]}}), "owner", n)
            else:
                properties = fencing.properties(table, [])
                print("checked", flush=True)
                sys.stdin.readline()
                write_deltalake(table, pa.table({{"n": [n]}}), mode="append", commit_properties=properties)
            print("wrote", n, flush=True)
        except Exception as err:
            print("refused", type(err).__name__, str(err).replace(chr(10), " "), flush=True)
"""
    return subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, lease.ENV: LEASE_SECONDS})


def _say(owner: subprocess.Popen, line: str) -> str:
    owner.stdin.write(line + "\n")
    owner.stdin.flush()
    return owner.stdout.readline().strip()


def _take_over(tables: Tables, frozen: subprocess.Popen) -> tuple[lease.Lease, float]:
    """SIGSTOP `frozen` and take the pipeline as soon as the lease lets anyone; the taker and its wait."""
    os.kill(frozen.pid, signal.SIGSTOP)
    began = time.monotonic()
    while lease.owner(tables) is not None:  # refused in one line while its row is unexpired
        assert time.monotonic() < began + 30, "the frozen owner's lease never expired"
        time.sleep(0.1)
    taker = lease.acquire(tables, lease.REBASE)
    waited = time.monotonic() - began
    fencing.raise_fence(taker, lease.guarded_tables(tables))
    fencing.register(taker, lease.guarded_tables(tables))
    return taker, waited


@ANY_PATH
def test_a_frozen_owner_is_fenced_out_of_every_commit_after_the_takeover(tables, monkeypatch):
    monkeypatch.setattr(lease, "FRESH_PART", 100.0)  # nor the taker's: the fence alone is tried here
    owner = _owner(tables)
    taker = None
    try:
        held = owner.stdout.readline().split()
        assert held[:1] == ["held"], owner.stderr.read()
        epoch = int(held[1])
        assert _say(owner, "write") == "wrote 1"
        assert _say(owner, "checked") == "checked"  # its checks passed; its commit is next when it wakes

        taker, waited = _take_over(tables, owner)
        # a live but frozen owner on this host: taken only after its expiry and then a whole lease unrenewed on
        # this process's clock
        assert waited >= float(LEASE_SECONDS), waited
        assert taker.epoch > epoch
        fenced_at = DeltaTable(tables.late).version()
        assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [100]}), "taker", 1)

        os.kill(owner.pid, signal.SIGCONT)
        woke = _say(owner, "")  # the commit it had prepared before the freeze
        assert woke.startswith("refused CommitFailedError"), woke
        again = _say(owner, "write")  # and every later attempt, refused before it is tried
        assert again.startswith("refused LeaseLost"), again
        assert "taken by `switchyard rebase`" in again or "fenced out" in again, again
        assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [101]}), "taker", 2)
    finally:
        if owner.poll() is None:
            os.kill(owner.pid, signal.SIGCONT)
            owner.stdin.close()
            owner.wait(timeout=60)
        if taker is not None:
            fencing.unregister(taker)
            taker.release()

    commits = _commits(tables.late)
    after = [c for c in commits if c["version"] >= fenced_at]
    fence = fencing.fence_version(taker.epoch)
    assert after and after[0]["txns"] == {fencing.FENCE_ID: fence} and after[0]["adds"] == 0
    assert all(c["txns"].get(fencing.FENCE_ID) == fence for c in after), after  # nothing of the old epoch
    rows = sorted(DeltaTable(tables.late).to_pyarrow_table().column("n").to_pylist())
    assert rows == [1, 100, 101]  # the frozen owner's first row; its prepared and later ones never landed


@ANY_PATH
def test_every_commit_of_a_holder_carries_its_epoch(tables):
    """delta-rs's commits of the holder, whichever way the warehouse's path is spelled: a batch's append, a handoff
    log entry, and a tidy of `state` (compaction, the retention property set, vacuum) each name the lease's epoch
    (the handoff log's creation, before it had a fence, aside)."""
    from switchyard.state_handoff.io import delta_upkeep

    for key in ("a", "b"):  # two files to compact
        write_deltalake(tables.state, pa.table({"key": [key]}), mode="append")
    before = {path: len(_commits(path)) for path in (tables.late, tables.state)}
    with lease.hold(tables, lease.STREAM, heartbeat_seconds=60) as held:
        assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [1]}), "owner", 1)
        handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)
        delta_upkeep.tidy(DeltaTable(tables.state))

    fence = fencing.fence_version(held.epoch)
    for path in (tables.late, tables.state, tables.handoffs):
        after = [c for c in _commits(path)[before.get(path, 0):] if c["operation"] != "CREATE TABLE"]
        assert after and all(c["epoch"] == str(held.epoch) for c in after), (path, after)
        assert all(c["txns"].get(fencing.FENCE_ID) == fence for c in after if c["operation"] != "OPTIMIZE"), after
    assert "SET TBLPROPERTIES" in [c["operation"] for c in _commits(tables.state)]


def test_a_table_has_one_identity_however_its_location_is_spelled(tmp_path):
    from switchyard.state_handoff.io import storage

    tables = Tables(_warehouse(tmp_path, "symlinked"), "demo")
    write_deltalake(tables.late, pa.table({"n": [1]}))
    uri = DeltaTable(tables.late).table_uri  # symlinks resolved, the space and the letter percent-encoded
    assert uri.startswith("file://") and "%C3%A4" in uri
    same = {storage.identity(spelling) for spelling in
            (tables.late, uri, tables.late + "/", f"{tables.warehouse}/demo/../demo/late",
             str(tmp_path / "real" / "wärehouse" / "demo" / "late"))}
    assert same == {str(tmp_path.resolve() / "real" / "wärehouse" / "demo" / "late")}
    assert storage.identity(str(tmp_path / "a%20b")) != storage.identity(str(tmp_path / "a b"))  # a plain path
    assert storage.identity("s3a://Bucket/wh//w%C3%A4rehouse/./demo/late/") == "s3://bucket/wh/wärehouse/demo/late"
    assert storage.identity("s3://bucket/wh/demo/late") != storage.identity("s3://bucket/wh/Demo/late")


def test_an_owner_whose_own_clock_says_its_lease_may_have_lapsed_writes_nothing(tables):
    with lease.hold(tables, lease.STREAM, heartbeat_seconds=60) as held:  # renewing far too seldom
        assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [1]}), "owner", 1)
        time.sleep(float(LEASE_SECONDS) * lease.FRESH_PART + 0.2)
        with pytest.raises(lease.LeaseLost, match="has not been renewed for"):
            append_arrow_once(DeltaTable(tables.late), pa.table({"n": [2]}), "owner", 2)
        with pytest.raises(lease.LeaseLost):
            handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)
        held.heartbeat()  # renewed, and nobody took it meanwhile: writing goes on
        assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [3]}), "owner", 3)
    assert sorted(DeltaTable(tables.late).to_pyarrow_table().column("n").to_pylist()) == [1, 3]


def test_the_handoff_log_refuses_an_entry_from_a_fenced_out_holder(tables, monkeypatch):
    monkeypatch.setattr(lease, "FRESH_PART", 100.0)  # an owner whose own clock fails to notice: the fence still holds
    with lease.hold(tables, lease.BACKFILL, heartbeat_seconds=60) as old:
        handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)
        while lease.owner(tables) is not None:
            time.sleep(0.1)
        taker = lease.acquire(tables, lease.HANDOFF)  # once the old lease has expired and stayed unrenewed
        fencing.raise_fence(taker, lease.guarded_tables(tables))
        assert fencing.holder(tables.handoffs) is old  # this process still believes in the old lease
        with pytest.raises(lease.LeaseLost, match="fenced out"):
            handoff_log.append(tables, "h1", Status.FAILED)
    assert [e.status for e in handoff_log.entries(tables)] == [Status.BACKFILL_STARTED]
    assert lease.latest_row(tables.leases).lease_id == taker.lease_id


def test_a_process_holding_no_lease_writes_unfenced(tables):
    assert fencing.holder(tables.late) is None
    assert append_arrow_once(DeltaTable(tables.late), pa.table({"n": [7]}), "tool", 1)
    assert all(fencing.FENCE_ID not in c["txns"] for c in _commits(tables.late))


def test_the_archive_record_commits_by_compare_and_swap_and_under_the_archive_lease(tables, monkeypatch):
    """Two writers plan from one record: the second commit, on the version it read, is refused and changes nothing;
    a holder of the archive's lease fenced out by a newer holder commits no record."""
    from switchyard.state_handoff.io.archive_files import archive_meta, commit_record, read_record, write_archive_meta

    root = tables.archive
    write_archive_meta(root, {"topic": "t", "runs": 1})
    version, _ = read_record(root)
    assert commit_record(root, {"topic": "t", "runs": 2}, version)
    assert not commit_record(root, {"topic": "t", "runs": 3}, version)  # planned from the record before
    assert archive_meta(root) == {"topic": "t", "runs": 2}
    with open(os.path.join(root, "_archive.json")) as fh:  # the copy for people follows the record
        assert json.load(fh) == {"topic": "t", "runs": 2}

    monkeypatch.setattr(lease, "FRESH_PART", 100.0)  # its own clock fails to notice: the fence still holds
    archive = tables.archive_writer()
    with lease.hold(archive, lease.ARCHIVE, heartbeat_seconds=60):
        while lease.owner(archive) is not None:
            time.sleep(0.1)
        taker = lease.acquire(archive, lease.ARCHIVE)
        fencing.raise_fence(taker, lease.guarded_tables(archive))
        with pytest.raises(lease.LeaseLost, match="fenced out"):
            commit_record(root, {"topic": "t", "runs": 4}, read_record(root)[0])
    assert archive_meta(root) == {"topic": "t", "runs": 2}


def test_sparks_delta_writes_are_fenced_too(spark, tables, monkeypatch):
    """The backfill's tables are written by Spark: its writes carry the fence as Delta's idempotent write, so once a
    newer holder has fenced a table, an older holder's Spark write there lands nothing."""
    from pyspark.sql import functions as F

    monkeypatch.setattr(lease, "FRESH_PART", 100.0)  # its own clock fails to notice: the fence still holds
    path = tables.state
    spark.range(3).withColumn("v", F.lit("first")).write.format("delta").save(path)
    with lease.hold(tables, lease.BACKFILL, heartbeat_seconds=60):
        (spark.range(4).withColumn("v", F.lit("holder")).write.format("delta").mode("overwrite")
         .options(**fencing.spark_options(path)).save(path))
        assert sorted(r.v for r in spark.read.format("delta").load(path).collect()) == ["holder"] * 4
        while lease.owner(tables) is not None:
            time.sleep(0.1)
        taker = lease.acquire(tables, lease.REBASE)
        fencing.raise_fence(taker, lease.guarded_tables(tables))
        with pytest.raises(lease.LeaseLost, match="fenced out"):  # checked before the write
            fencing.spark_options(path)
        stale = {"txnAppId": fencing.FENCE_ID, "txnVersion": str(fencing.fence_version(taker.epoch - 1) + 99)}
        (spark.range(5).withColumn("v", F.lit("stale")).write.format("delta").mode("overwrite")
         .options(**stale).save(path))  # a write whose check came before the fence: Delta skips it
    assert sorted(r.v for r in spark.read.format("delta").load(path).collect()) == ["holder"] * 4
    taker.release()


def test_a_compaction_begun_before_the_takeover_is_refused_inside_its_commit(tables, monkeypatch):
    """delta-rs's compaction keeps no app transaction, so the fence's own transaction cannot stop it: a holder
    frozen after its compaction's checks passed, woken after a takeover, would commit it. The fence rewrites the
    table's metadata, so that compaction fails at its commit and its holder stops with LeaseLost; the table keeps
    the taker's fence as its last commit."""
    monkeypatch.setattr(lease, "FRESH_PART", 100.0)  # the fence alone is tried, not the holder's own clock
    for n in (1, 2):  # two files to compact
        write_deltalake(tables.late, pa.table({"n": [n]}), mode="append")
    guarded = lease.guarded_tables(tables)
    frozen = lease.acquire(tables, lease.STREAM)
    fencing.raise_fence(frozen, guarded)
    begun = DeltaTable(tables.late)  # the frozen holder's compaction: it read the table and its checks passed
    fencing.properties(begun, [], frozen)
    deadline = time.monotonic() + 30
    while lease.owner(tables) is not None:  # the frozen holder renews nothing: its lease expires
        assert time.monotonic() < deadline, "the frozen holder's lease never expired"
        time.sleep(0.1)
    taker = lease.acquire(tables, lease.REBASE)
    try:
        fencing.raise_fence(taker, guarded)
        with pytest.raises(lease.LeaseLost, match="fenced out"):
            fencing.commit(begun, [], lambda properties: begun.optimize.compact(commit_properties=properties), frozen)
    finally:
        taker.release()
    last = _commits(tables.late)[-1]
    assert last["txns"] == {fencing.FENCE_ID: fencing.fence_version(taker.epoch)} and last["adds"] == 0, last
    assert sorted(DeltaTable(tables.late).to_pyarrow_table().column("n").to_pylist()) == [1, 2]
