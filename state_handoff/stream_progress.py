"""The stream's resume state in Delta: one row per committed batch of a Delta-writing query, through delta-rs.

A row is appended as the last write of its batch, tagged (txn app id, batch id) like the batch's other
writes, so a replayed batch neither loses nor doubles it. The events query's rows carry what the next
batch needs (the watermark) and the per-partition accounting; every row names the checkpoint incarnation
that wrote it, so a stream whose checkpoint was lost or replaced can tell.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from state_handoff.io import delta_cas, delta_upkeep
from state_handoff.io.storage import delta_options
from state_handoff.tables import Tables

EVENTS = "events"
STATE = "state"


@dataclass(frozen=True)
class BatchRow:
    handoff_id: str
    query: str
    incarnation: str
    batch_id: int
    watermark_before: datetime | None
    watermark_after: datetime | None
    partitions: dict[str, dict]
    started: datetime
    finished: datetime


def _schema():
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([("handoff_id", pa.string()), ("query", pa.string()), ("incarnation", pa.string()),
                      ("batch_id", pa.int64()), ("watermark_before", ts), ("watermark_after", ts),
                      ("partitions", pa.string()), ("started", ts), ("finished", ts)])


def _utc(t: datetime | None) -> datetime | None:
    if t is None:
        return None
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def _naive(t) -> datetime | None:
    if t is None:
        return None
    t = t.to_pydatetime() if hasattr(t, "to_pydatetime") else t
    return t.astimezone(timezone.utc).replace(tzinfo=None) if t.tzinfo else t


def app_id(row_or_query: BatchRow | str, handoff_id: str | None = None, incarnation: str | None = None) -> str:
    if isinstance(row_or_query, BatchRow):
        handoff_id, incarnation, query = row_or_query.handoff_id, row_or_query.incarnation, row_or_query.query
    else:
        query = row_or_query
    return f"switchyard-progress-{handoff_id}-{query}-{incarnation}"


def _table(tables: Tables):
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(tables.stream_batches, storage_options=delta_options(tables.stream_batches))
    except TableNotFoundError:
        return None


def record(tables: Tables, row: BatchRow) -> bool:
    """Append the row unless this (query, incarnation, batch) is already recorded; True when appended."""
    import pyarrow as pa
    from deltalake import CommitProperties, Transaction, write_deltalake

    txn = app_id(row)
    table = _table(tables)
    done = None if table is None else table.transaction_version(txn)
    if done is not None and done >= row.batch_id:  # batch 0 counts: a version of 0 is not falsy here
        return False
    data = pa.Table.from_pylist([{
        "handoff_id": row.handoff_id, "query": row.query, "incarnation": row.incarnation, "batch_id": row.batch_id,
        "watermark_before": _utc(row.watermark_before), "watermark_after": _utc(row.watermark_after),
        "partitions": json.dumps(row.partitions), "started": _utc(row.started), "finished": _utc(row.finished),
    }], schema=_schema())
    write_deltalake(table if table is not None else tables.stream_batches, data, mode="append",
                    storage_options=None if table is not None else delta_options(tables.stream_batches),
                    commit_properties=CommitProperties(app_transactions=[Transaction(txn, row.batch_id)]))
    # one row a commit from both Delta-writing queries: whichever makes a due version compacts (appends, the
    # other query's included, never conflict with a compaction)
    if table is not None and delta_upkeep.due(table.version()):
        delta_upkeep.tidy(table)
    return True


def batches(tables: Tables, handoff_id: str, query: str | None = EVENTS) -> list[BatchRow]:
    """The handoff's recorded batches of one query (of every query with None), by batch id."""
    import pyarrow.compute as pc

    table = _table(tables)
    if table is None:
        return []
    data = delta_cas.read(table)
    wanted = pc.equal(data["handoff_id"], handoff_id)
    if query is not None:
        wanted = pc.and_(wanted, pc.equal(data["query"], query))
    rows = []
    for r in data.filter(wanted).to_pylist():
        rows.append(BatchRow(r["handoff_id"], r["query"], r["incarnation"], r["batch_id"],
                             _naive(r["watermark_before"]), _naive(r["watermark_after"]),
                             json.loads(r["partitions"] or "{}"), _naive(r["started"]), _naive(r["finished"])))
    return sorted(rows, key=lambda b: b.batch_id)


def batch(tables: Tables, handoff_id: str, query: str, incarnation: str, batch_id: int) -> BatchRow | None:
    return next((b for b in batches(tables, handoff_id, query)
                 if b.incarnation == incarnation and b.batch_id == batch_id), None)


def incarnations(tables: Tables, handoff_id: str) -> dict[str, set[str]]:
    """Which checkpoint incarnations of each query have written batches of this handoff (one read)."""
    found: dict[str, set[str]] = {}
    for b in batches(tables, handoff_id, query=None):
        found.setdefault(b.query, set()).add(b.incarnation)
    return found


def accounting(rows: list[BatchRow]) -> dict[str, dict[str, int]]:
    """Per partition over the events batches: read, well_formed, dead_lettered, late, skipped_overlap."""
    per_partition: dict[str, dict[str, int]] = {}
    for b in rows:
        for p, counts in b.partitions.items():
            acc = per_partition.setdefault(p, {"read": 0, "well_formed": 0, "dead_lettered": 0, "late": 0,
                                               "skipped_overlap": 0})
            for k in acc:
                acc[k] += counts.get(k, 0)
    return per_partition
