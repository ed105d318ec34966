"""The handoff log: an append-only Delta table, one row per transition event of a pipeline."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

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


def entries(spark: SparkSession, tables: Tables) -> list[Row]:
    """All entries, oldest first; empty when the log does not exist yet."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, tables.handoffs):
        return []
    return spark.read.format("delta").load(tables.handoffs).orderBy("at").collect()


def latest(spark: SparkSession, tables: Tables, status: str | None = None) -> Row | None:
    rows = [r for r in entries(spark, tables) if status is None or r.status == status]
    return rows[-1] if rows else None


def details(entry: Row) -> dict:
    return json.loads(entry.details or "{}")


def offsets(entry: Row) -> dict[int, int]:
    return {int(k): int(v) for k, v in json.loads(entry.start_offsets or "{}").items()}
