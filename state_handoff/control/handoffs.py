"""A committed handoff as the log records it: its start offsets per partition, backlog watermark, the `state` version
its stream seeds from, and (time mode) the archived records its stream skips. Read from HANDOFF_COMMITTED entries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.tables import Tables

OFFSETS = "offsets"
TIME = "time"
BOUNDARY_MODES = (OFFSETS, TIME)


@dataclass(frozen=True)
class Overlap:
    """Time mode: a tail record whose Kafka timestamp is at or before `until` and whose identity is in the
    Parquet folder `path` was archived already. The identities are those of every archived record with a
    Kafka timestamp at or after `since` (T minus the allowed lateness, for producer timestamps out of order)."""

    at: datetime
    since: datetime
    until: datetime
    path: str


@dataclass(frozen=True)
class Handoff:
    handoff_id: str
    topic: str
    start_offsets: dict[int, int]
    backlog_watermark: datetime | None
    state_version: int
    committed_at: datetime
    reused: bool = False
    overlap: Overlap | None = None

    @property
    def boundary_mode(self) -> str:
        return TIME if self.overlap else OFFSETS

    def summary(self, pipeline: str) -> str:
        verb = "already committed" if self.reused else "committed"
        offsets = ", ".join(f"p{p}:{o}" for p, o in sorted(self.start_offsets.items()))
        boundary = (f"boundary time at {self.overlap.at}, archived records re-read up to {self.overlap.until} "
                    "are skipped" if self.overlap else "boundary offsets")
        return (f"handoff {pipeline} {self.handoff_id} {verb}: topic {self.topic} from {offsets}; {boundary}; "
                f"state version {self.state_version}; backlog watermark {self.backlog_watermark}")


def from_entry(entry: LogEntry, reused: bool = False) -> Handoff:
    committed = details.of(entry)
    overlap = None
    if committed.boundary_mode == TIME:
        overlap = Overlap(*(datetime.fromisoformat(t) for t in (committed.at, committed.overlap_since,
                                                                committed.overlap_until)), committed.overlap)
    return Handoff(entry.handoff_id, committed.topic, handoff_log.offsets(entry),
                   entry.backlog_watermark, entry.state_version, entry.at, reused, overlap)


def current_handoff(tables: Tables) -> Handoff | None:
    """The pipeline's latest committed handoff, or None."""
    entry = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    return from_entry(entry, reused=True) if entry else None
