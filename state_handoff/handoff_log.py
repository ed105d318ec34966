"""The handoff log: an append-only Delta table, one row per transition event of a pipeline."""

from __future__ import annotations

import json
import os
import uuid
from datetime import datetime, timezone
from types import SimpleNamespace
from urllib.parse import unquote

from pyspark.sql import Row, SparkSession

from state_handoff.tables import Tables

BACKFILL_STARTED = "BACKFILL_STARTED"
BACKFILL_COMMITTED = "BACKFILL_COMMITTED"
HANDOFF_COMMITTED = "HANDOFF_COMMITTED"
STREAM_STARTED = "STREAM_STARTED"
SWITCHED = "SWITCHED"
CAUGHT_UP = "CAUGHT_UP"
FALLING_BEHIND = "FALLING_BEHIND"
STOPPED = "STOPPED"
FAILED = "FAILED"
STATUSES = (BACKFILL_STARTED, BACKFILL_COMMITTED, HANDOFF_COMMITTED, STREAM_STARTED, SWITCHED, CAUGHT_UP,
            FALLING_BEHIND, STOPPED, FAILED)

SCHEMA = ("handoff_id STRING, pipeline STRING, status STRING, at TIMESTAMP, state_version BIGINT, "
          "start_offsets STRING, backlog_watermark TIMESTAMP, details STRING")


def new_handoff_id() -> str:
    return uuid.uuid4().hex[:12]


def append(spark: SparkSession, tables: Tables, handoff_id: str, status: str, *, state_version: int | None = None,
           start_offsets: dict | None = None, backlog_watermark: datetime | None = None,
           details: dict | None = None) -> Row:
    """Append one entry; a Delta commit, so it is there entirely or not at all."""
    assert status in STATUSES, status
    entry = Row(handoff_id=handoff_id, pipeline=tables.pipeline, status=status,
                at=datetime.now(timezone.utc).replace(tzinfo=None), state_version=state_version,
                start_offsets=json.dumps({str(k): v for k, v in start_offsets.items()}) if start_offsets is not None else None,
                backlog_watermark=backlog_watermark, details=json.dumps(details or {}, default=str))
    spark.createDataFrame([entry], SCHEMA).write.format("delta").mode("append").save(tables.handoffs)
    return entry


def entries(spark: SparkSession | None, tables: Tables) -> list[SimpleNamespace]:
    """All entries, oldest first; empty when the log does not exist yet.

    Read straight from the Delta log with pyarrow (the table is append-only and tiny), so `status` and
    monitors need no JVM; `spark` is accepted for symmetry with `append`.
    """
    import pyarrow.parquet as pq

    log_dir = os.path.join(tables.handoffs, "_delta_log")
    if not os.path.isdir(log_dir):
        return []
    files: dict[str, None] = {}
    for name in sorted(n for n in os.listdir(log_dir) if n.endswith(".json")):
        with open(os.path.join(log_dir, name)) as fh:
            for line in fh:
                action = json.loads(line)
                if "add" in action:
                    files[unquote(action["add"]["path"])] = None
                elif "remove" in action:
                    files.pop(unquote(action["remove"]["path"]), None)
    rows = []
    for path in files:
        for record in pq.read_table(os.path.join(tables.handoffs, path)).to_pylist():
            for column in ("at", "backlog_watermark"):
                value = record[column]
                if value is not None:
                    value = value.to_pydatetime() if hasattr(value, "to_pydatetime") else value  # INT96 -> pandas
                    record[column] = value.astimezone(timezone.utc).replace(tzinfo=None) if value.tzinfo else value
            rows.append(SimpleNamespace(**record))
    return sorted(rows, key=lambda r: r.at)


def latest(spark: SparkSession | None, tables: Tables, status: str | None = None,
           handoff_id: str | None = None) -> SimpleNamespace | None:
    rows = [r for r in entries(spark, tables)
            if (status is None or r.status == status) and (handoff_id is None or r.handoff_id == handoff_id)]
    return rows[-1] if rows else None


def details(entry) -> dict:
    return json.loads(entry.details or "{}")


def offsets(entry) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(entry.start_offsets or "{}").items()}
