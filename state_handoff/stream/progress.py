"""The stream's resume state in Delta: one row per committed batch of a Delta-writing query, through delta-rs.

A row is appended as the last write of its batch, tagged (txn app id, batch id) like the batch's other
writes, so a replayed batch neither loses nor doubles it. The events query's rows carry what the next
batch needs (the watermark), the per-partition accounting and the offset range [start, end) per partition the
batch read; every row names the checkpoint incarnation that wrote it, so a stream whose checkpoint was lost or
replaced can tell. The range makes a batch id replayed over other offsets a refusal, not a silent skip: the
skip is right only when the replay reads exactly what the first attempt read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone

from switchyard.state_handoff.errors import Failed
from switchyard.state_handoff.io import delta_cas, delta_upkeep, fencing
from switchyard.state_handoff.io.storage import delta_options
from switchyard.state_handoff.tables import Tables

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
    offsets: dict[str, list[int | None]] | None = None  # per partition [start, end): the events query's rows


class BatchRangeConflict(Failed):
    """A batch id already committed over one offset range is asked to write another: skipping its writes as
    already done would lose the new range's records or count the old range's twice."""


def offset_range(start: dict[int, int], end: dict[int, int]) -> dict[str, list[int | None]]:
    """Per partition of `end`, [start, end): the form a row records its range in."""
    return {str(p): [start.get(p), int(o)] for p, o in sorted(end.items())}


def check_same_range(row: BatchRow, offsets: dict[str, list[int | None]], table: str) -> None:
    """Refuse, in one line, to treat `row`'s batch as the one now asked over `offsets` when their ranges differ."""
    if row.offsets == offsets:
        return
    def show(r):
        return ", ".join(f"p{p}:[{a},{b})" for p, (a, b) in sorted(r.items(), key=lambda i: int(i[0])))
    raise BatchRangeConflict(
        f"{row.query} batch {row.batch_id} of handoff {row.handoff_id} (checkpoint {row.incarnation}) is committed "
        f"in {table} over {show(row.offsets)}, but is asked to write {show(offsets)}: refusing to skip it as done; "
        "a step wrote this batch id outside the stream's checkpoint")


def _schema():
    import pyarrow as pa

    ts = pa.timestamp("us", tz="UTC")
    return pa.schema([("handoff_id", pa.string()), ("query", pa.string()), ("incarnation", pa.string()),
                      ("batch_id", pa.int64()), ("watermark_before", ts), ("watermark_after", ts),
                      ("partitions", pa.string()), ("started", ts), ("finished", ts), ("offsets", pa.string())])


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
        "offsets": None if row.offsets is None else json.dumps(row.offsets),
    }], schema=_schema())
    if table is None:  # the first row makes the table: nothing to fence yet
        write_deltalake(tables.stream_batches, data, mode="append", storage_options=delta_options(tables.stream_batches),
                        commit_properties=CommitProperties(app_transactions=[Transaction(txn, row.batch_id)]))
        return True
    fencing.commit(table, [Transaction(txn, row.batch_id)], lambda properties: write_deltalake(
        table, data, mode="append", commit_properties=properties))
    # one row a commit from both Delta-writing queries: whichever makes a due version compacts (appends, the
    # other query's included, never conflict with a compaction)
    if delta_upkeep.due(table.version()):
        delta_upkeep.tidy(table)
    return True


def batches(tables: Tables, handoff_id: str, query: str | None = EVENTS) -> list[BatchRow]:
    """The handoff's recorded batches of one query (of every query with None), by batch id."""
    import pyarrow.compute as pc

    table = _table(tables)
    if table is None:
        return []
    # read by filter, so the files' statistics skip other handoffs' rows: the cost is the handoff's, not the table's
    data = delta_cas.read(table, where=f"handoff_id = '{_quoted(handoff_id)}'"
                          + (f" AND query = '{_quoted(query)}'" if query is not None else ""))
    wanted = pc.equal(data["handoff_id"], handoff_id)
    if query is not None:
        wanted = pc.and_(wanted, pc.equal(data["query"], query))
    rows = []
    for r in data.filter(wanted).to_pylist():
        rows.append(BatchRow(r["handoff_id"], r["query"], r["incarnation"], r["batch_id"],
                             _naive(r["watermark_before"]), _naive(r["watermark_after"]),
                             json.loads(r["partitions"] or "{}"), _naive(r["started"]), _naive(r["finished"]),
                             json.loads(r["offsets"]) if r["offsets"] else None))
    return sorted(rows, key=lambda b: b.batch_id)


def _quoted(text: str) -> str:
    return text.replace("'", "''")


def batch(tables: Tables, handoff_id: str, query: str, incarnation: str, batch_id: int) -> BatchRow | None:
    return next((b for b in batches(tables, handoff_id, query)
                 if b.incarnation == incarnation and b.batch_id == batch_id), None)


def committed_batch(tables: Tables, handoff_id: str, query: str, incarnation: str, batch_id: int) -> BatchRow | None:
    """`batch`, but the rows are read only when the table's transaction version says the batch may be there: the
    check a batch makes before its writes, cheap in the usual case of a batch not yet recorded."""
    table = _table(tables)
    done = None if table is None else table.transaction_version(
        app_id(query, handoff_id=handoff_id, incarnation=incarnation))
    if done is None or done < batch_id:
        return None
    return batch(tables, handoff_id, query, incarnation, batch_id)


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
