"""Keeping a long-lived pipeline's Delta tables small, through delta-rs: small files compacted, replaced files deleted.

A stream writes its Delta tables every few seconds for months. Each batch adds small files (`stream_batches`,
`windows`, `dead_letter`, `late`), and each MERGE or DELETE (`state`, `window_state`) writes the files it touches
anew and leaves the old ones behind, unreferenced but on disk: under steady input the tables grow by gigabytes a
day, and readers of a table of many small files slow down with every batch. So every SWITCHYARD_TIDY_EVERY-th batch the
writer of a table compacts it (delta-rs's optimize: a commit that changes no data) and vacuums what was replaced
longer than RETENTION_HOURS ago. The writer does it in its own thread, between its own writes: a compaction beside
a MERGE of the same table would make one of the two fail. A backfill's commit, which replaces whole tables and
days of tiles, vacuums the tables it wrote (no compaction: its files are large).

Delta's retention check stays on: RETENTION_HOURS is written into the table as `delta.deletedFileRetentionDuration`
and every vacuum here uses the table's own retention, never asking for less (Delta refuses a shorter one). What
must outlive it is named by version (`keep_versions`): the files of the snapshot a handoff was committed with, which
its stream reads again when it seeds without the seed's files (state_handoff/control/kept_versions.py), whatever their age.
A version the table's log no longer holds (Delta's log retention, 30 days by default, deleted its commit) can be
read by no one, so its files are not kept: asking delta-rs to keep it would fail that vacuum and every later one.
"""

from __future__ import annotations

import logging

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from switchyard.state_handoff import settings
from switchyard.state_handoff.io import fencing, storage

EVERY_ENV = "SWITCHYARD_TIDY_EVERY"  # by default 100 batches: at the stream's 5 s trigger, every ~8 minutes
RETENTION_HOURS = 1  # far longer than any reader of a snapshot needs its files; Delta's own default is 7 days
RETENTION_PROPERTY = "delta.deletedFileRetentionDuration"

log = logging.getLogger(__name__)


def tidy_every() -> int:
    """Batches between two tidies of a stream's table (SWITCHYARD_TIDY_EVERY)."""
    return settings.value(EVERY_ENV)


def due(batch_id: int, every: int | None = None) -> bool:
    """Whether batch `batch_id` (counted from 0) is one after which its tables are tidied."""
    every = every or tidy_every()
    return batch_id % every == every - 1


def tidy(table, table_retention: bool = False, keep_versions: list[int] | None = None) -> None:
    """Compact the deltalake DeltaTable `table` and delete the files replaced more than RETENTION_HOURS ago (the
    table's own retention, Delta's 7 days by default, with `table_retention`), except the files of
    `keep_versions`. Best effort: the data is committed either way, and a compaction that loses a race with another
    writer's commit is tried again at the next tidy."""
    try:
        fencing.commit(table, [], lambda properties: table.optimize.compact(commit_properties=properties))
        _vacuum(table, table_retention, keep_versions)
    except (DeltaError, OSError) as err:
        log.warning("Delta table %s: compaction or vacuum skipped: %s", table.table_uri, err)


def vacuum(uri: str, keep_versions: list[int] | None = None) -> None:
    """Delete the files of the Delta table at `uri` replaced more than RETENTION_HOURS ago, except the files of
    `keep_versions`; nothing when there is no table. Best effort, as `tidy`."""
    if not storage.exists(storage.join(uri, "_delta_log")):
        return
    try:
        _vacuum(DeltaTable(uri, storage_options=storage.delta_options(uri)), False, keep_versions)
    except (DeltaError, OSError) as err:
        log.warning("Delta table %s: vacuum skipped: %s", uri, err)


def restore(uri: str, version: int) -> None:
    """The Delta table at `uri` restored to `version` in one fenced metadata commit (the files of that version added
    back, the others removed; none copied); nothing when it is at that version's content already. Raises delta-rs's
    error when the version's log or files are gone."""
    table = DeltaTable(uri, storage_options=storage.delta_options(uri))
    if table.version() != version:
        fencing.commit(table, [], lambda properties: table.restore(version, commit_properties=properties))


def retention(hours: int) -> str:
    """A retention as Delta's table properties spell it."""
    return f"interval {hours} hours"


def _vacuum(table, table_retention: bool, keep_versions: list[int] | None) -> None:
    if not table_retention:
        wanted = retention(RETENTION_HOURS)
        if table.metadata().configuration.get(RETENTION_PROPERTY) != wanted:
            fencing.commit(table, [], lambda properties: table.alter.set_table_properties(
                {RETENTION_PROPERTY: wanted}, commit_properties=properties))
    # the retention check on: the table's retention, never a shorter one; a version to keep that fails to load
    # for another reason than the log's retention fails the vacuum (nothing deleted) rather than being skipped
    keep = _in_log(table, sorted(set(keep_versions or [])))
    fencing.commit(table, [], lambda properties: table.vacuum(
        dry_run=False, enforce_retention_duration=True, keep_versions=keep or None, commit_properties=properties))


def _in_log(table, versions: list[int]) -> list[int]:
    """`versions` less those whose commits the table's log no longer holds, each named in a warning."""
    held = []
    for version in versions:
        if version >= table.version():
            held.append(version)
            continue
        try:
            DeltaTable(table.table_uri, version=version, storage_options=storage.delta_options(table.table_uri))
        except TableNotFoundError:  # delta-rs: "No files in log segment"
            log.warning("Delta table %s: version %s is no longer in its log (log retention): its files are not "
                        "kept", table.table_uri, version)
            continue
        held.append(version)
    return held
