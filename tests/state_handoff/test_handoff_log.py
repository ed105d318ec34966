"""The handoff log through delta-rs: commit order after checkpoints and log cleanup, exact `seq` under
concurrent writers, and a table the project's Spark reads."""

from __future__ import annotations

import json
import os
import threading
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.parquet as pq
from deltalake import DeltaTable
from pyspark.sql.types import LongType, TimestampType

from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import REQUESTS, Status
from switchyard.state_handoff.tables import Tables

FROZEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _log_files(tables: Tables) -> list[str]:
    return sorted(os.listdir(os.path.join(tables.handoffs, "_delta_log")))


def _commit_versions(tables: Tables) -> list[int]:
    return [int(name.split(".")[0]) for name in _log_files(tables) if name.endswith(".json")]


# the field of each status's details that carries the tag telling the entries apart
TAG = {Status.BACKFILL_STARTED: "strategy", Status.BACKFILL_COMMITTED: "records_read",
       Status.HANDOFF_COMMITTED: "overlap_identities", Status.STREAM_STARTED: "pid",
       Status.SWITCHED: "seconds_since_start", Status.PAUSED: "reason", Status.CAUGHT_UP: "batch_id",
       Status.FALLING_BEHIND: "batch_id"}


def _tagged(status: Status, i: int):
    """Details that tell the entries apart: `i` in a field of its status's class, or in a request's own."""
    return {"i": i} if status in REQUESTS else details.CLASSES[status](**{TAG[status]: i})


def _tag(entry) -> int:
    if entry.status in REQUESTS:
        return handoff_log.details(entry)["i"]
    return getattr(details.of(entry), TAG[entry.status])


def test_entries_in_commit_order_after_checkpoints_and_log_cleanup(tmp_path, monkeypatch):
    """Every entry is read back, in commit order, once its commit survives only inside a checkpoint."""
    monkeypatch.setattr(handoff_log, "utc_now", lambda: FROZEN)  # one `at` for all: the clock cannot order them
    tables = Tables(str(tmp_path), "demo")
    assert handoff_log.entries(tables) == []

    # the lives of four handoffs, one after the other: committed, streamed, switched, asked to rebase, paused
    handoff_ids = [handoff_log.new_handoff_id() for _ in range(4)]
    written = [handoff_log.append(tables, handoff_ids[0], Status.BACKFILL_STARTED)]
    DeltaTable(tables.handoffs).alter.set_table_properties(
        {"delta.checkpointInterval": "4", "delta.logRetentionDuration": "interval 0 seconds"})
    cycle = (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED,
             Status.SWITCHED, Status.REBASE_REQUESTED, Status.PAUSED)
    for i in range(21):
        status = cycle[i % len(cycle)]
        written.append(handoff_log.append(tables, handoff_ids[i // len(cycle)], status,
                                          state_version=i, start_offsets={0: i, 1: 2 * i},
                                          backlog_watermark=datetime(2026, 1, 1), details=_tagged(status, i)))
    DeltaTable(tables.handoffs).cleanup_metadata()

    checkpoints = [int(n.split(".")[0]) for n in _log_files(tables) if n.endswith(".checkpoint.parquet")]
    assert checkpoints and max(checkpoints) >= 20, _log_files(tables)
    assert min(_commit_versions(tables)) >= max(checkpoints) > written[-3].seq, "old commits are still there"

    read = handoff_log.entries(tables)
    assert [(e.seq, e.handoff_id, e.status) for e in read] == [(w.seq, w.handoff_id, w.status) for w in written]
    assert [e.seq for e in read] == sorted({e.seq for e in read})
    assert {e.at for e in read} == {FROZEN.replace(tzinfo=None)}
    assert vars(read[-1]) == vars(written[-1])
    assert handoff_log.offsets(read[5]) == {0: 4, 1: 8} and handoff_log.details(read[5]) == {"i": 4}
    assert read[5].backlog_watermark == datetime(2026, 1, 1)

    last_handoff = [w for w in written if w.status == Status.HANDOFF_COMMITTED][-1]
    assert last_handoff is not written[-1]
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED).handoff_id == last_handoff.handoff_id
    assert handoff_log.latest(tables).handoff_id == written[-1].handoff_id


def test_a_long_log_compacts_itself_and_keeps_every_entry_in_order(tmp_path, monkeypatch):
    """An append that finds COMPACT_FILES row files compacts them into one: no entry is lost, changed or moved,
    and the appends after it still carry the versions of the commits that added them."""
    monkeypatch.setattr(handoff_log, "COMPACT_FILES", 8)
    tables = Tables(str(tmp_path), "demo")
    written = []
    files_seen = []
    switch = (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED,
              Status.SWITCHED)
    for i in range(30):  # one handoff's switch, then its lag going up and down
        status = switch[i] if i < len(switch) else (Status.CAUGHT_UP, Status.FALLING_BEHIND)[i % 2]
        written.append(handoff_log.append(tables, "h", status, start_offsets={0: i}, details=_tagged(status, i)))
        files_seen.append(len(DeltaTable(tables.handoffs).file_uris()))

    assert max(files_seen) < 8, files_seen
    compactions = [v for v in _commit_versions(tables)
                   if "OPTIMIZE" in Path(tables.handoffs, "_delta_log", f"{v:020d}.json").read_text()]
    assert len(compactions) >= 3, compactions
    read = handoff_log.entries(tables)
    assert [vars(e) for e in read] == [vars(w) for w in written]
    assert [_tag(e) for e in read] == list(range(30))
    # every commit after the table's creation is either the append of one entry, at its seq, or a compaction
    assert sorted([e.seq for e in read] + compactions) == list(range(1, DeltaTable(tables.handoffs).version() + 1))


def test_concurrent_appends_carry_their_exact_commit_versions(tmp_path):
    """Two writers racing from an empty warehouse (the table's creation too): each row's `seq` is the
    version of the commit that added it, read independently from the JSON commits."""
    tables = Tables(str(tmp_path), "demo")
    per_writer, start = 25, threading.Barrier(2)
    results: dict[str, list] = {}

    def writer(name: str) -> None:
        start.wait()
        results[name] = [handoff_log.append(tables, f"{name}-{i}", Status.BACKFILL_STARTED,
                                            details=_tagged(Status.BACKFILL_STARTED, i))
                         for i in range(per_writer)]

    threads = [threading.Thread(target=writer, args=(name,)) for name in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    returned = {e.handoff_id: e.seq for es in results.values() for e in es}
    assert len(returned) == 2 * per_writer and len(set(returned.values())) == 2 * per_writer

    added_at: dict[str, int] = {}
    for version in _commit_versions(tables):
        with open(os.path.join(tables.handoffs, "_delta_log", f"{version:020d}.json")) as fh:
            for action in map(json.loads, fh):
                if "add" in action:
                    for row in pq.read_table(os.path.join(tables.handoffs, action["add"]["path"])).to_pylist():
                        assert row["seq"] == version, (row["handoff_id"], row["seq"], version)
                        added_at[row["handoff_id"]] = version
    assert added_at == returned

    read = handoff_log.entries(tables)
    assert [e.seq for e in read] == sorted(returned.values())
    for name in ("a", "b"):  # each writer's own entries keep its order
        assert [e.handoff_id for e in read if e.handoff_id.startswith(name)] == [f"{name}-{i}" for i in range(per_writer)]


def test_spark_reads_the_log_delta_rs_wrote(spark, tmp_path):
    tables = Tables(str(tmp_path), "demo")
    written = [handoff_log.append(tables, "h1", status, state_version=3,
                                  backlog_watermark=datetime(2026, 1, 1, 12, 30))
               for status in (Status.BACKFILL_STARTED, Status.BACKFILL_COMMITTED,
                              Status.HANDOFF_COMMITTED)]
    frame = spark.read.format("delta").load(tables.handoffs)
    assert isinstance(frame.schema["at"].dataType, TimestampType)
    assert isinstance(frame.schema["backlog_watermark"].dataType, TimestampType)
    assert isinstance(frame.schema["seq"].dataType, LongType)
    rows = frame.orderBy("seq").collect()
    assert len(rows) == 3
    assert [(r.seq, r.status, r.at, r.backlog_watermark) for r in rows] == \
        [(w.seq, w.status, w.at, w.backlog_watermark) for w in written]
