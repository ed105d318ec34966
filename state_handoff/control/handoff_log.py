"""The handoff log: an append-only Delta table, one row per transition event of a pipeline.

Written and read through delta-rs, so no caller needs a JVM, and the table may live at any URI delta-rs
opens. Each row carries `seq`, the Delta commit version that added it: the log's order survives
checkpoints, log cleanup and compaction, after which the files no longer say which commit added them.

A pipeline's log grows for as long as it lives (every backfill, handoff, rebase and lag change adds an entry),
one small file per entry; every reader (the stream's supervisor, `status`, Dagster's sensors) reads them all. So
an append that finds COMPACT_FILES or more row files in the table compacts them into one (delta-rs's optimize,
a commit that changes no data) and vacuums the files compacted away longer than the table's retention ago
(Delta's default, 7 days), so a long log is read from one file, not from one per entry.

An append is checked against the lifecycle (state_handoff/lifecycle.py) on the snapshot its compare-and-swap
commits after: a status that may not follow its handoff's earlier entries is refused, in one line. Its details are
the class of its status (control/details.py, which reads them back too), or a request's (control/requests.py).
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from switchyard.state_handoff import format as table_format
from switchyard.state_handoff.clock import as_utc, naive_utc, utc_now
from switchyard.state_handoff.control.lifecycle import REQUESTS, Status, check_transition
from switchyard.state_handoff.io import delta_cas, delta_upkeep, fencing
from switchyard.state_handoff.io.storage import delta_options
from switchyard.state_handoff.tables import Tables

if TYPE_CHECKING:  # not at run time: details.py imports requests.py, which imports this module
    from switchyard.state_handoff.control.details import Details

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
_TIMES = ("at", "backlog_watermark")


@dataclass(frozen=True)
class LogEntry:
    """One entry as callers read it: times naive UTC; `start_offsets` and `details` their JSON text, read with
    `offsets(entry)` and `details.of(entry)` (control/details.py; a request's with `requests.read(entry)`)."""

    seq: int
    handoff_id: str
    pipeline: str
    status: Status
    at: datetime
    state_version: int | None
    start_offsets: str | None
    backlog_watermark: datetime | None
    details: str | None

    @classmethod
    def from_row(cls, row: dict) -> LogEntry:
        """From a row of the table (or of a commit being made): aware times become naive UTC."""
        return cls(**{**row, "status": Status(row["status"]), **{k: naive_utc(row[k]) for k in _TIMES}})

    def as_payload(self) -> dict:
        """As JSON-ready values (times in ISO 8601), for a message to another process."""
        return {**vars(self), **{k: getattr(self, k).isoformat() if getattr(self, k) else None for k in _TIMES}}

    @classmethod
    def from_payload(cls, payload: dict) -> LogEntry:
        """Back from `as_payload`."""
        return cls(**{**payload, "status": Status(payload["status"]),
                      **{k: datetime.fromisoformat(payload[k]) if payload.get(k) else None for k in _TIMES}})


def new_handoff_id() -> str:
    return uuid.uuid4().hex[:12]


def warehouse_id(tables: Tables) -> str:
    """The warehouse's identity: the id Delta gave the log's table when it was created (12 hex digits). Two
    warehouses never share one, however their paths are spelled; a copy of the log's files keeps it."""
    table = DeltaTable(tables.handoffs, storage_options=delta_options(tables.handoffs))
    return table.metadata().id.replace("-", "")[:12]


def _open_or_create(tables: Tables) -> DeltaTable:
    """The log; created empty on first use, after the format its tables hold is recorded (state_handoff/format.py),
    so a log is never without it."""
    try:
        return DeltaTable(tables.handoffs, storage_options=delta_options(tables.handoffs))
    except TableNotFoundError:
        table_format.record(tables.format_version)
    return delta_cas.open_or_create(tables.handoffs, SCHEMA, name="handoffs",
                                    description="append-only handoff log, ordered by seq (its commit version)")


def _history(table: DeltaTable, handoff_id: str) -> list[str]:
    """The statuses of `handoff_id` at the table's snapshot, in log order (version 0 is the empty table)."""
    if table.version() == 0:
        return []
    quoted = handoff_id.replace("'", "''")
    rows = delta_cas.read(table, ["status"], order_by="seq", where=f"\"handoff_id\" = '{quoted}'")
    return rows.column("status").to_pylist()


def append(tables: Tables, handoff_id: str, status: str, *, state_version: int | None = None,
           start_offsets: dict | None = None, backlog_watermark: datetime | None = None,
           details: Details | dict | None = None) -> LogEntry:
    """Append one entry as one Delta commit, so it is there entirely or not at all (no JVM: delta-rs).

    Refused with lifecycle.LifecycleError when `status` may not follow the handoff's earlier entries, as read
    at the snapshot the commit lands after. The entry's `seq` is the version of the commit that adds it: the
    commit is attempted at exactly the version after the one read, with no retries inside delta-rs (which would
    move it to a later version than `seq` says), and a lost race re-reads the log, checks again and tries the
    next version.

    `details`: the class of `status` (control/details.py), or a request's dict (control/requests.py); anything
    else is refused with TypeError before the log is read.
    """
    status = Status(status)
    return _commit(tables, handoff_id, status, state_version, start_offsets, backlog_watermark,
                   _written(status, details))


def _written(status: Status, details: Details | dict | None) -> dict:
    """The JSON-ready details of an entry of `status`."""
    if details is None:
        return {}
    if isinstance(details, dict):
        if status not in REQUESTS:
            raise TypeError(f"{status}'s details are written as its class in control/details.py, not as a dict")
        return details
    if status not in details.STATUSES:
        raise TypeError(f"{type(details).__name__} details are not {status}'s: they are "
                        f"{', '.join(sorted(details.STATUSES))}'s")
    return details.as_details()


def _commit(tables: Tables, handoff_id: str, status: Status, state_version: int | None, start_offsets: dict | None,
            backlog_watermark: datetime | None, details: dict) -> LogEntry:
    row = {"handoff_id": handoff_id, "pipeline": tables.pipeline, "status": str(status), "at": utc_now(),
           "state_version": state_version,
           "start_offsets": (json.dumps({str(k): v for k, v in start_offsets.items()})
                             if start_offsets is not None else None),
           "backlog_watermark": as_utc(backlog_watermark), "details": json.dumps(details, default=str)}
    for _ in range(COMMIT_ATTEMPTS):
        table = _open_or_create(tables)
        check_transition(tables.pipeline, handoff_id, status, _history(table, handoff_id))
        seq = table.version() + 1
        if delta_cas.commit_next(table, pa.Table.from_pylist([{"seq": seq, **row}], SCHEMA),
                                 properties=fencing.properties(table, [])):
            if len(table.file_uris()) >= COMPACT_FILES:
                delta_upkeep.tidy(table, table_retention=True)  # the entry is in; the compaction is best effort
            return LogEntry.from_row({"seq": seq, **row})
    raise RuntimeError(f"handoff log {tables.handoffs}: no commit after {COMMIT_ATTEMPTS} attempts; "
                       "too many concurrent writers")


def entries(tables: Tables) -> list[LogEntry]:
    """All entries in commit order, oldest first; empty when the log does not exist yet."""
    try:
        table = DeltaTable(tables.handoffs, storage_options=delta_options(tables.handoffs))
    except TableNotFoundError:
        return []
    return [LogEntry.from_row(row) for row in delta_cas.read(table, SCHEMA.names, order_by="seq").to_pylist()]


def latest(tables: Tables, status: str | None = None, handoff_id: str | None = None) -> LogEntry | None:
    rows = [r for r in entries(tables)
            if (status is None or r.status == status) and (handoff_id is None or r.handoff_id == handoff_id)]
    return rows[-1] if rows else None


def details(entry) -> dict:
    """An entry's details as the JSON dict it holds: for requests.py; every other reader reads them typed, with
    control/details.py's `of`."""
    return json.loads(entry.details or "{}")


def offsets(entry) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(entry.start_offsets or "{}").items()}
