"""The one UTC clock of the control state: timestamps in the handoff log and the lease are UTC, aware in memory
and in Delta (TIMESTAMP), naive where callers compare them with Spark's naive UTC values."""

from __future__ import annotations

from datetime import datetime, timezone


def utc_now() -> datetime:
    """Now, as an aware UTC datetime."""
    return datetime.now(timezone.utc)


def as_utc(value: datetime | None) -> datetime | None:
    """An aware UTC datetime; a naive one is taken as UTC (deploy/spark.py runs every process in UTC)."""
    if value is None:
        return None
    return value.astimezone(timezone.utc) if value.tzinfo else value.replace(tzinfo=timezone.utc)


def naive_utc(value: datetime | None) -> datetime | None:
    """The same instant as a naive UTC datetime, as Spark and the log's readers hold it."""
    return None if value is None else as_utc(value).replace(tzinfo=None)
