"""Keeping a long-lived pipeline's Delta tables small, through delta-rs: small files compacted, replaced files deleted.

A stream writes its Delta tables every few seconds for months. Each batch adds small files (`stream_batches`,
`windows`, `dead_letter`, `late`), and each MERGE or DELETE (`state`, `window_state`) writes the files it touches
anew and leaves the old ones behind, unreferenced but on disk: under steady input the tables grow by gigabytes a
day, and readers of a table of many small files slow down with every batch. So every TIDY_EVERY-th batch the
writer of a table compacts it (delta-rs's optimize: a commit that changes no data) and vacuums what was replaced
longer than RETENTION_HOURS ago. The writer does it in its own thread, between its own writes: a compaction beside
a MERGE of the same table would make one of the two fail. A backfill's commit, which replaces whole tables and
days of tiles, vacuums the tables it wrote (no compaction: its files are large).
"""

from __future__ import annotations

import logging
import os

from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from state_handoff.errors import UserError
from state_handoff.io import storage

EVERY_ENV = "SWITCHYARD_TIDY_EVERY"
TIDY_EVERY = 100  # batches; at the stream's 5 s trigger, every ~8 minutes of steady input
RETENTION_HOURS = 1  # far longer than any reader of a snapshot needs its files; Delta's own default is 7 days

log = logging.getLogger(__name__)


def tidy_every() -> int:
    """Batches between two tidies of a stream's table (SWITCHYARD_TIDY_EVERY, default TIDY_EVERY)."""
    text = os.environ.get(EVERY_ENV)
    if text is None:
        return TIDY_EVERY
    try:
        every = int(text)
    except ValueError:
        every = 0
    if every < 1:
        raise UserError(f"{EVERY_ENV} must be a whole number of batches of at least 1, not {text!r}")
    return every


def due(batch_id: int, every: int | None = None) -> bool:
    """Whether batch `batch_id` (counted from 0) is one after which its tables are tidied."""
    every = every or tidy_every()
    return batch_id % every == every - 1


def tidy(table, table_retention: bool = False) -> None:
    """Compact the deltalake DeltaTable `table` and delete the files replaced more than RETENTION_HOURS ago (the
    table's own retention, Delta's 7 days by default, with `table_retention`). Best effort: the data is committed
    either way, and a compaction that loses a race with another writer's commit is tried again at the next tidy."""
    try:
        table.optimize.compact()
        _vacuum(table, table_retention)
    except (DeltaError, OSError) as err:
        log.warning("Delta table %s: compaction or vacuum skipped: %s", table.table_uri, err)


def vacuum(uri: str) -> None:
    """Delete the files of the Delta table at `uri` replaced more than RETENTION_HOURS ago; nothing when there is
    no table. Best effort, as `tidy`."""
    if not storage.exists(storage.join(uri, "_delta_log")):
        return
    try:
        _vacuum(DeltaTable(uri, storage_options=storage.delta_options(uri)), table_retention=False)
    except (DeltaError, OSError) as err:
        log.warning("Delta table %s: vacuum skipped: %s", uri, err)


def _vacuum(table, table_retention: bool) -> None:
    if table_retention:
        table.vacuum(dry_run=False)
    else:
        table.vacuum(retention_hours=RETENTION_HOURS, dry_run=False, enforce_retention_duration=False)
