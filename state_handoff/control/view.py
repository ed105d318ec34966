"""Where a pipeline stands, read once per decision: who holds its lease, then its handoff log, and the current
handoff's progress cache when asked. `switchyard status` and the metrics, Dagster's checks and sensor, and `switchyard
serve` each decide from one view, with no JVM (delta-rs and a JSON file).

The lease is read before the log: a stream logs STOPPED and then lets go of its lease, so read the other way round a
clean stop could look like a process gone without one."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from switchyard.state_handoff.control import details, handoff_log, lease, lifecycle
from switchyard.state_handoff.control.details import HandoffCommitted
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.handoffs import Handoff, from_entry
from switchyard.state_handoff.control.ledger import Ledger
from switchyard.state_handoff.control.lifecycle import Phase, Status
from switchyard.state_handoff.control.recorded_definition import recorded
from switchyard.state_handoff.stream.layout import read_json, stream_dir
from switchyard.state_handoff.tables import Tables


@dataclass(frozen=True)
class PipelineView:
    """One look at a pipeline: `owner` of its lease (None: nobody holds it), then `entries`, its log, oldest first."""

    tables: Tables
    owner: lease.Owner | None
    entries: tuple[LogEntry, ...]

    @classmethod
    def read(cls, tables: Tables) -> PipelineView:
        owner = lease.owner(tables)  # before the log: see the module's docstring
        return cls(tables, owner, tuple(handoff_log.entries(tables)))

    @property
    def streaming(self) -> bool:
        """A `switchyard stream` holds the pipeline."""
        return self.owner is not None and self.owner.command == lease.STREAM

    @property
    def last(self) -> LogEntry | None:
        return self.entries[-1] if self.entries else None

    @property
    def last_seq(self) -> int:
        return self.last.seq if self.last else -1

    def latest(self, status: Status, handoff_id: str | None = None) -> LogEntry | None:
        """The newest entry of `status` (of handoff `handoff_id`, when given)."""
        return next((e for e in reversed(self.entries)
                     if e.status == status and (handoff_id is None or e.handoff_id == handoff_id)), None)

    @property
    def handoff(self) -> LogEntry | None:
        """The current handoff's entry: the newest HANDOFF_COMMITTED."""
        return self.latest(Status.HANDOFF_COMMITTED)

    @cached_property
    def current_handoff(self) -> Handoff | None:
        """The current handoff, as its stream runs it."""
        entry = self.handoff
        return from_entry(entry, reused=True) if entry else None

    @cached_property
    def ledger(self) -> Ledger:
        """Which requests are open, paused, answered or ended (control/ledger.py)."""
        return Ledger.of(self.entries)

    @property
    def updates_topic(self) -> str | None:
        """The updates topic the newest stream start recorded; None before any stream started."""
        started = self.latest(Status.STREAM_STARTED)
        return details.of(started).updates_topic if started is not None else None

    def since(self, seq: int) -> list[LogEntry]:
        """The entries after `seq`, oldest first."""
        return [e for e in self.entries if e.seq > seq]

    def history(self, handoff_id: str) -> list[Status]:
        """The statuses handoff `handoff_id` went through, oldest first."""
        return [e.status for e in self.entries if e.handoff_id == handoff_id]

    @property
    def backfill(self) -> LogEntry | None:
        return self.latest(Status.BACKFILL_COMMITTED)

    @property
    def recorded_definition(self) -> tuple[LogEntry, dict] | None:
        """The newest backfill or handoff that recorded its definition, and that record (None: none did yet)."""
        return recorded(self.entries)

    @property
    def phase(self) -> Phase:
        standing = next((e for e in reversed(self.entries) if e.status not in lifecycle.NOTES), None)
        return lifecycle.phase(standing.status if standing else None, self.streaming)

    @property
    def rebases(self) -> list[HandoffCommitted]:
        """The details of each handoff a rebase committed (those carry its reconciliation), oldest first."""
        return [d for d in (details.of(e) for e in self.entries if e.status == Status.HANDOFF_COMMITTED)
                if d.reconciliation is not None]

    @property
    def current(self) -> LogEntry | None:
        """The current handoff's newest entry that moved it (a refused rebase request left it as it was)."""
        handoff = self.handoff
        if handoff is None:
            return None
        return [e for e in self.entries if e.handoff_id == handoff.handoff_id
                and e.status not in lifecycle.REFUSALS][-1]

    @cached_property
    def progress(self) -> dict:
        """The current handoff's stream's last look at itself (its progress cache); empty when there is none."""
        handoff = self.handoff
        return (read_json(stream_dir(self.tables, handoff.handoff_id) / "progress.json") or {}) if handoff else {}
