"""A long-lived pipeline's upkeep: the files a stream's MERGEs leave behind are deleted and its small files compacted
through delta-rs, losing nothing a batch wrote (rows, or the transaction that makes its replay a no-op); and the
seeds and checkpoints of handoffs a later one replaced are deleted, nothing else; and vacuum goes on for a handoff
that lives longer than Delta's log retention."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from switchyard.jobs.delta_txn import merge_once
from switchyard.state_handoff.control import handoff_log, kept_versions
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep
from switchyard.state_handoff.io.delta_cas import read
from switchyard.state_handoff.settings import BY_NAME
from switchyard.state_handoff.stream.layout import RUN_PARTS, prune_earlier_streams, stream_dir
from switchyard.state_handoff.tables import Tables


def _rows(keys, value: int) -> pa.Table:
    return pa.table({"key": [f"k{k:04d}" for k in keys], "event_count": pa.array([value] * len(keys), pa.int64())})


def _on_disk(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), path) for root, _, names in os.walk(path)
            if "_delta_log" not in root for name in names if name.endswith(".parquet")}


def _active(table: DeltaTable) -> set[str]:
    return {os.path.relpath(uri.removeprefix("file://"), table.table_uri.removeprefix("file://"))
            for uri in table.file_uris()}


def test_tidy_deletes_what_merges_replaced_and_keeps_rows_and_transactions(tmp_path, monkeypatch):
    path = str(tmp_path / "state")
    for part in range(4):  # a table of small files, as a backfill's overwrite and a stream's appends leave
        write_deltalake(path, _rows(range(part * 250, (part + 1) * 250), 0), mode="append")
    table = DeltaTable(path)
    for batch in range(12):
        merge_once(table, _rows(range(batch, 1000, 7), batch + 1), 't."key" = s."key"', "app-state", batch)
    before = read(table, order_by="key").to_pylist()
    assert len(_on_disk(path)) > len(_active(table))

    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 0)
    delta_upkeep.tidy(table)

    table = DeltaTable(path)
    assert _on_disk(path) == _active(table) and len(_active(table)) == 1
    assert read(table, order_by="key").to_pylist() == before
    # a replayed batch still finds its transaction and writes nothing; the next batch merges as before
    assert not merge_once(table, _rows([0], 99), 't."key" = s."key"', "app-state", 11)
    assert merge_once(table, _rows([0], 99), 't."key" = s."key"', "app-state", 12)
    assert read(table, order_by="key").to_pylist()[0] == {"key": "k0000", "event_count": 99}


def test_tidy_keeps_files_replaced_within_the_retention(tmp_path):
    path = str(tmp_path / "t")
    write_deltalake(path, _rows(range(10), 0))
    write_deltalake(path, _rows(range(10, 20), 0), mode="append")
    table = DeltaTable(path)
    delta_upkeep.tidy(table)  # the stream's retention: an hour
    assert len(_active(DeltaTable(path))) == 1 and len(_on_disk(path)) == 3
    assert DeltaTable(path).count() == 20


def test_which_batches_are_due_and_a_bad_setting(monkeypatch):
    assert [b for b in range(10) if delta_upkeep.due(b, every=3)] == [2, 5, 8]
    monkeypatch.setenv(delta_upkeep.EVERY_ENV, "1")
    assert all(delta_upkeep.due(b) for b in range(3))
    monkeypatch.delenv(delta_upkeep.EVERY_ENV)
    assert delta_upkeep.tidy_every() == int(BY_NAME[delta_upkeep.EVERY_ENV].default)
    for bad in ("0", "-3", "ten"):
        monkeypatch.setenv(delta_upkeep.EVERY_ENV, bad)
        with pytest.raises(UserError, match="SWITCHYARD_TIDY_EVERY must be a whole number"):
            delta_upkeep.tidy_every()


def test_a_live_handoff_prunes_what_earlier_streams_needed_to_run(tmp_path):
    tables = Tables(str(tmp_path), "demo")
    log = [SimpleNamespace(handoff_id=h, status=s) for h, s in (
        ("old", "BACKFILL_STARTED"), ("old", "HANDOFF_COMMITTED"), ("older-unused", "HANDOFF_COMMITTED"),
        ("live", "BACKFILL_STARTED"), ("old", "REBASE_REQUESTED"), ("live", "SWITCHED"), ("next", "BACKFILL_STARTED"))]
    for handoff in ("old", "older-unused", "live", "next"):
        for part in RUN_PARTS:
            os.makedirs(stream_dir(tables, handoff) / part / "sub")
            open(stream_dir(tables, handoff) / part / "sub" / "f", "w").close()
        open(stream_dir(tables, handoff) / "progress.json", "w").close()

    assert prune_earlier_streams(tables, "live", log) == ["old", "older-unused"]
    for handoff, kept in (("old", False), ("older-unused", False), ("live", True), ("next", True)):
        assert all(os.path.isdir(stream_dir(tables, handoff) / part) == kept for part in RUN_PARTS), handoff
        assert os.path.isfile(stream_dir(tables, handoff) / "progress.json"), "the progress cache stays"
    assert prune_earlier_streams(tables, "live", log) == [], "nothing left to prune"
    assert prune_earlier_streams(tables, "not-in-the-log", log) == []


def test_vacuum_keeps_the_versions_named_and_the_tables_retention_check(tmp_path, monkeypatch):
    """The files of a version to keep (a handoff's state version) outlive every vacuum; the retention is the
    table's own property, and Delta's check refuses a vacuum asking for less."""
    path = str(tmp_path / "state")
    write_deltalake(path, _rows(range(10), 0))  # version 0: what a handoff seeds from
    table = DeltaTable(path)
    for batch in range(3):
        merge_once(table, _rows(range(10), batch + 1), 't."key" = s."key"', "app-state", batch)
    handoff_files = _active(DeltaTable(path, version=0))
    assert not handoff_files & _active(DeltaTable(path))

    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 0)
    delta_upkeep.vacuum(path, keep_versions=[0])
    assert _on_disk(path) == _active(DeltaTable(path)) | handoff_files, "the merges' leftovers go, version 0 stays"
    assert read(DeltaTable(path, version=0), order_by="key").to_pylist() == _rows(range(10), 0).to_pylist()

    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 1)
    delta_upkeep.tidy(DeltaTable(path), keep_versions=[0])
    table = DeltaTable(path)
    assert table.metadata().configuration[delta_upkeep.RETENTION_PROPERTY] == "interval 1 hours"
    with pytest.raises(Exception, match="(?i)retention"):
        table.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=True)


def _expire_log_before_now(path: str) -> None:
    """What Delta's log retention does to a table's log in time (30 days by default): the commits before its newest
    checkpoint deleted, so no earlier version can be loaded."""
    table = DeltaTable(path)
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 0 hours"})
    table = DeltaTable(path)
    table.create_checkpoint()
    table.cleanup_metadata()
    with pytest.raises(Exception):
        DeltaTable(path, version=0)


def _handoff_at_version_0(tables: Tables, switched: bool) -> None:
    statuses = [Status.BACKFILL_STARTED, Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED]
    statuses += [Status.STREAM_STARTED, Status.SWITCHED] if switched else []
    for status in statuses:
        version = 0 if status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED) else None
        handoff_log.append(tables, "year-long", status, state_version=version,
                           start_offsets={0: 0} if status == Status.HANDOFF_COMMITTED else None)


@pytest.mark.parametrize("switched", [True, False])
def test_vacuum_of_state_goes_on_after_the_log_forgets_the_handoffs_version(tmp_path, monkeypatch, switched):
    """A handoff streams for a year: its state version's commit leaves the log (Delta's log retention) long before.
    Once SWITCHED its seed is in the stream's checkpoint, so the version is kept no more; a version the log no longer
    holds cannot be read by anyone, so it is not kept either. Either way every vacuum of `state` still deletes what
    the stream's MERGEs replaced."""
    tables = Tables(str(tmp_path), "demo")
    write_deltalake(tables.state, _rows(range(10), 0))  # version 0: what the handoff seeds from
    _handoff_at_version_0(tables, switched)
    table = DeltaTable(tables.state)
    for batch in range(3):
        merge_once(table, _rows(range(10), batch + 1), 't."key" = s."key"', "app-state", batch)
    _expire_log_before_now(tables.state)

    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 0)
    delta_upkeep.vacuum(tables.state, keep_versions=kept_versions.kept_state_versions(PipelineView.read(tables)))
    assert _on_disk(tables.state) == _active(DeltaTable(tables.state)), "the merges' leftovers are deleted"
    assert read(DeltaTable(tables.state), order_by="key").to_pylist() == _rows(range(10), 3).to_pylist()
    if switched:
        assert kept_versions.kept_state_versions(PipelineView.read(tables)) == [], "a switched handoff's seed is in its checkpoint"


def test_a_handoff_not_yet_switched_keeps_its_version_and_a_switched_one_releases_it(tmp_path):
    tables = Tables(str(tmp_path), "demo")
    _handoff_at_version_0(tables, switched=False)
    assert kept_versions.kept_state_versions(PipelineView.read(tables)) == [0]
    handoff_log.append(tables, "year-long", Status.STREAM_STARTED)
    assert kept_versions.kept_state_versions(PipelineView.read(tables)) == [0], "its stream may still seed from it"
    handoff_log.append(tables, "year-long", Status.SWITCHED)
    assert kept_versions.kept_state_versions(PipelineView.read(tables)) == []
