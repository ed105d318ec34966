"""The handoff log: an append-only Delta table, one row per transition event of a pipeline.

Written and read through delta-rs, so no caller needs a JVM, and the table may live at any URI delta-rs
opens. Each row carries `seq`, the Delta commit version that added it: the log's order survives
checkpoints, log cleanup and compaction, after which the files no longer say which commit added them.

A pipeline's log grows for as long as it lives (every backfill, handoff, rebase and lag change adds an entry),
one small file per entry; every reader (the stream's supervisor, `status`, Dagster's sensors) reads them all. So
an append that finds COMPACT_FILES or more row files in the table compacts them into one (delta-rs's optimize,
a commit that changes no data) and vacuums the files compacted away longer than the table's retention ago
(Delta's default, 7 days): reading 1,000 entries from 1,000 files took 0.50 s here, from one 0.023 s.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from state_handoff import delta_cas, delta_upkeep
from state_handoff.storage import delta_options
from state_handoff.tables import Tables

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

BACKFILL_STARTED = "BACKFILL_STARTED"
BACKFILL_COMMITTED = "BACKFILL_COMMITTED"
HANDOFF_COMMITTED = "HANDOFF_COMMITTED"
STREAM_STARTED = "STREAM_STARTED"
SWITCHED = "SWITCHED"
CAUGHT_UP = "CAUGHT_UP"
FALLING_BEHIND = "FALLING_BEHIND"
STOPPED = "STOPPED"
FAILED = "FAILED"
REBASE_REQUESTED = "REBASE_REQUESTED"
PAUSED = "PAUSED"
STATUSES = (BACKFILL_STARTED, BACKFILL_COMMITTED, HANDOFF_COMMITTED, STREAM_STARTED, SWITCHED, CAUGHT_UP,
            FALLING_BEHIND, STOPPED, FAILED, REBASE_REQUESTED, PAUSED)

# Timestamps carry the UTC zone: that is Delta's (and Spark's) TIMESTAMP; a naive one would be TIMESTAMP_NTZ.
UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("seq", pa.int64()),
    ("handoff_id", pa.string()),
    ("pipeline", pa.string()),
    ("status", pa.string()),
    ("at", UTC_TIMESTAMP),
    ("state_version", pa.int64()),
    ("start_offsets", pa.string()),
    ("backlog_watermark", UTC_TIMESTAMP),
    ("details", pa.string()),
])
COMMIT_ATTEMPTS = 100
COMPACT_FILES = 100


def new_handoff_id() -> str:
    return uuid.uuid4().hex[:12]


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _as_utc(value: datetime | None) -> datetime | None:
    """Naive datetimes here are UTC (deploy/spark.py runs the process in UTC)."""
    if value is None:
        return None
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def _naive_utc(value: datetime | None) -> datetime | None:
    return None if value is None else _as_utc(value).replace(tzinfo=None)


def _open_or_create(uri: str) -> DeltaTable:
    return delta_cas.open_or_create(uri, SCHEMA, name="handoffs",
                                    description="append-only handoff log, ordered by seq (its commit version)")


def append(spark: SparkSession | None, tables: Tables, handoff_id: str, status: str, *,
           state_version: int | None = None, start_offsets: dict | None = None,
           backlog_watermark: datetime | None = None, details: dict | None = None) -> SimpleNamespace:
    """Append one entry as one Delta commit, so it is there entirely or not at all; `spark` is unused.

    The entry's `seq` is the version of the commit that adds it: the commit is attempted at exactly the
    version after the one read, with no retries inside delta-rs (which would move it to a later version
    than `seq` says), and a lost race re-reads the log and tries the next version.
    """
    assert status in STATUSES, status
    entry = SimpleNamespace(
        handoff_id=handoff_id, pipeline=tables.pipeline, status=status, at=_now(), state_version=state_version,
        start_offsets=json.dumps({str(k): v for k, v in start_offsets.items()}) if start_offsets is not None else None,
        backlog_watermark=_as_utc(backlog_watermark), details=json.dumps(details or {}, default=str))
    for _ in range(COMMIT_ATTEMPTS):
        table = _open_or_create(tables.handoffs)
        seq = table.version() + 1
        if delta_cas.commit_next(table, pa.Table.from_pylist([{"seq": seq, **vars(entry)}], SCHEMA)):
            if len(table.file_uris()) >= COMPACT_FILES:
                delta_upkeep.tidy(table, table_retention=True)  # the entry is in; the compaction is best effort
            return SimpleNamespace(seq=seq, **{**vars(entry), "at": _naive_utc(entry.at),
                                               "backlog_watermark": _naive_utc(entry.backlog_watermark)})
    raise RuntimeError(f"handoff log {tables.handoffs}: no commit after {COMMIT_ATTEMPTS} attempts; "
                       "too many concurrent writers")


def entries(spark: SparkSession | None, tables: Tables) -> list[SimpleNamespace]:
    """All entries in commit order, oldest first; empty when the log does not exist yet. `spark` is unused."""
    try:
        table = DeltaTable(tables.handoffs, storage_options=delta_options(tables.handoffs))
    except TableNotFoundError:
        return []
    rows = delta_cas.read(table, SCHEMA.names, order_by="seq").to_pylist()
    return [SimpleNamespace(**{**row, "at": _naive_utc(row["at"]),
                               "backlog_watermark": _naive_utc(row["backlog_watermark"])}) for row in rows]


def latest(spark: SparkSession | None, tables: Tables, status: str | None = None,
           handoff_id: str | None = None) -> SimpleNamespace | None:
    rows = [r for r in entries(spark, tables)
            if (status is None or r.status == status) and (handoff_id is None or r.handoff_id == handoff_id)]
    return rows[-1] if rows else None


def details(entry) -> dict:
    return json.loads(entry.details or "{}")


def offsets(entry) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(entry.start_offsets or "{}").items()}
