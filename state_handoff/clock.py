"""The clocks of switchyard's state, below everything that writes it: the one UTC clock of its timestamps (the
handoff log, the lease and the archive's commit records are UTC, aware in memory and in Delta (TIMESTAMP), naive where
callers compare them with Spark's naive UTC values), and the monotonic clock its waits run on, injectable."""

from __future__ import annotations

import time
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


class Clock:
    """Seconds on one monotonic clock, and waiting on it: what a wait for an answer is given, so a test advances a
    ManualClock instead of sleeping."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class ManualClock(Clock):
    """A clock that moves only when slept on (or `advance`d)."""

    def __init__(self, now: float = 0.0):
        self.now = now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    advance = sleep


SYSTEM = Clock()
