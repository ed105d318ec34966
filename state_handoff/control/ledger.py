"""Which requests of a pipeline's log are open, paused, answered or ended: one ledger computed once from the entries,
read by everything that decides from them (the stream, `serve`, `rebase --abandon`, the vacuums, `rollback`).

The rules, side by side. A rebase request (REBASE_REQUESTED) is

- **paused** once a PAUSED names it: its cut is recorded, and from there the catch-up may write the events path past
  the paused stream's checkpoint;
- **answered** by the HANDOFF_COMMITTED at its cut;
- **open** (the stream must run it before it streams) until it is answered, REBASE_REFUSED (logged before its pause
  only), REBASE_ABANDONED, a FAILED before its pause, or a RECONCILIATION_FAILED that left the paused stream
  resumable (nothing replaced, nothing written past its checkpoint). A FAILED after its pause leaves it open: the
  catch-up may have written the events path past the paused stream's checkpoint, so the handoff at the recorded cut
  (or, while the paused stream is resumable, an abandonment) is the only way on;
- keeping its paused `state` version for a vacuum until a handoff at or after its cut has SWITCHED (its own or a
  later one), or until it ended without replacing anything (a resumable RECONCILIATION_FAILED, an abandonment);
- keeping, for a redeploy, the `tiles` version its tiles replaced until answered, abandoned or refused. Unlike
  *open*, a resumable RECONCILIATION_FAILED does not end this: the redeploy's tiles may hold the table until
  `rebase --abandon` restores the version, which must still exist then.

A paused rebase's FAILEDs are counted since the last START_REQUESTED: past a bound, a stream refuses to run it again by
itself (an operator acts, then `switchyard start` counts anew). A stop request (STOP_REQUESTED) is for the stream
holding its `lease_id` alone. A start request (START_REQUESTED)
lifts every stop request and hold-down before it; so does the handoff of a redeploy for the stop that redeploy asked
for (a redeploy killed after its handoff, or whose stop timed out, leaves no stopped pipeline behind). The previous definition (for `rollback`) is the one the newest
answered redeploy replaced, until a PREVIOUS_DROPPED names that redeploy."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from switchyard.state_handoff.control import details
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import (REDEPLOY, Cut, PreviousDropped, RebaseRequest, StartRequest,
                                                       StopRequest, read)


@dataclass(frozen=True)
class PreviousDefinition:
    """The definition the newest handed-off redeploy replaced: its `record`, the `tiles` version holding its tiles,
    the archive `files` those fold (the latest backfill before the redeploy's), the redeploy's `request_id`, the
    handoff at its cut, and whether a PREVIOUS_DROPPED let it go."""

    record: dict
    tiles_version: int | None
    files: list[str]
    request_id: str
    handoff_id: str
    dropped: bool


@dataclass(frozen=True)
class Ledger:
    """The requests of `entries` (oldest first) and what answered each; build it with `Ledger.of(entries)`."""

    rebases: tuple[RebaseRequest, ...]           # each with `paused` filled once a PAUSED named it
    stops: tuple[StopRequest, ...]
    starts: tuple[StartRequest, ...]
    dropped: tuple[PreviousDropped, ...]
    answered: dict[str, LogEntry]                # request id -> the HANDOFF_COMMITTED at its cut
    ended: frozenset[str]                        # refused, abandoned, or a resumable reconciliation failure
    kept_paused: dict[str, int]                  # request id -> its paused `state` version a vacuum keeps
    at_cut_backfills: dict[str, LogEntry] = field(default_factory=dict)  # request id -> its BACKFILL_COMMITTED
    tiles_ended: frozenset[str] = frozenset()    # answered, abandoned or refused: a redeploy's tiles version goes
    entries: tuple[LogEntry, ...] = ()
    failed_since_start: dict[str, int] = field(default_factory=dict)  # request id -> FAILEDs after its pause, since
    # the last START_REQUESTED (an operator's start counts them anew)

    @classmethod
    def of(cls, entries: Sequence[LogEntry]) -> Ledger:
        rebases, stops, starts, dropped = [], [], [], []
        paused: dict[str, Cut] = {}
        answered, backfills = {}, {}
        refused, abandoned, reconciled, failed = set(), set(), set(), set()
        kept, switched_past, failed_after_pause = {}, set(), {}
        for e in entries:
            asked = read(e)
            if isinstance(asked, StartRequest):
                failed_after_pause = {}
            if asked is not None:
                {RebaseRequest: rebases, StopRequest: stops, StartRequest: starts,
                 PreviousDropped: dropped}[type(asked)].append(asked)
                continue
            logged, request_id = details.of(e), details.request_id(e)
            if e.status == Status.SWITCHED:
                switched_past |= set(answered)  # a stream serves a state at or past every cut answered so far
            if request_id is None:
                if e.status == Status.BACKFILL_COMMITTED and (logged.at_cut or {}).get("request_id"):
                    backfills[logged.at_cut["request_id"]] = e
                continue
            if e.status == Status.PAUSED:
                paused[request_id] = Cut.from_details(logged.cut)
                if paused[request_id].state_version is not None:
                    kept[request_id] = int(paused[request_id].state_version)
            elif e.status == Status.HANDOFF_COMMITTED:
                answered[request_id] = e
            elif e.status == Status.REBASE_REFUSED:
                refused.add(request_id)
            elif e.status == Status.REBASE_ABANDONED:
                abandoned.add(request_id)
            elif e.status == Status.FAILED:
                failed.add(request_id)
                if request_id in paused and not logged.not_now:
                    failed_after_pause[request_id] = failed_after_pause.get(request_id, 0) + 1
            elif e.status == Status.RECONCILIATION_FAILED and logged.resumable:
                reconciled.add(request_id)  # nothing replaced: the stream goes on from its own state
        ended = frozenset(refused | abandoned | reconciled | (failed - set(paused)))
        kept = {r: v for r, v in kept.items() if r not in switched_past and r not in abandoned and r not in reconciled}
        return cls(tuple(replace(r, paused=paused.get(r.request_id)) for r in rebases), tuple(stops), tuple(starts),
                   tuple(dropped), answered, ended, kept, backfills,
                   frozenset(set(answered) | abandoned | refused), tuple(entries), failed_after_pause)

    # ---------------------------------------------------------------- rebases

    def is_open(self, request: RebaseRequest) -> bool:
        return request.request_id not in self.answered and request.request_id not in self.ended

    @property
    def open_rebase(self) -> RebaseRequest | None:
        """The oldest rebase request still open: what a (re)starting stream must run before it streams."""
        return next((r for r in self.rebases if self.is_open(r)), None)

    def rebase(self, request_id: str) -> RebaseRequest | None:
        return next((r for r in self.rebases if r.request_id == request_id), None)

    def failures_after_pause(self, request: RebaseRequest) -> int:
        """How often the paused rebase of `request` failed since the last START_REQUESTED (or ever); a failure for
        the moment (Kafka or the registry out of reach) is not counted: it is retried for as long as it lasts."""
        return self.failed_since_start.get(request.request_id, 0)

    def committed_backfill_for(self, request_id: str) -> LogEntry | None:
        """The BACKFILL_COMMITTED a rebase (or redeploy) wrote at its cut, or None yet."""
        return self.at_cut_backfills.get(request_id)

    @property
    def paused_state_versions(self) -> dict[str, int]:
        return dict(self.kept_paused)

    @property
    def open_redeploy_tiles_versions(self) -> set[int]:
        return {int(r.redeploy.tiles_version) for r in self.rebases
                if r.redeploy is not None and r.redeploy.tiles_version is not None
                and r.request_id not in self.tiles_ended}

    @property
    def previous_definition(self) -> PreviousDefinition | None:
        """The definition the newest handed-off redeploy replaced, kept for `switchyard rollback` (None: no redeploy
        was handed off)."""
        for asked in reversed(self.rebases):
            if asked.redeploy is None or asked.request_id not in self.answered:
                continue
            before = next((e for e in reversed(self.entries)
                           if e.seq < asked.seq and e.status == Status.BACKFILL_COMMITTED), None)
            return PreviousDefinition(
                asked.redeploy.record, asked.redeploy.tiles_version,
                (details.of(before).tiled_files or []) if before is not None else [], asked.request_id,
                self.answered[asked.request_id].handoff_id,
                any(d.redeploy_request == asked.request_id for d in self.dropped))
        return None

    # ---------------------------------------------------------------- stops and starts

    def stop_for(self, lease_id: str) -> StopRequest | None:
        """The stop request for the stream holding lease `lease_id`, or None."""
        return next((r for r in self.stops if r.lease_id == lease_id), None)

    def stop_in_force(self) -> StopRequest | None:
        """The newest stop request, while it holds: no start request came after it, and it is not a redeploy's own
        stop whose redeploy then handed off (the stream it stopped is the recorded definition's; the changed one's is
        to stream, whether or not the redeploy lived to ask for its start)."""
        if not self.stops or self.newest_seq(StartRequest) > self.stops[-1].seq:
            return None
        stop = self.stops[-1]
        if stop.requested_by == REDEPLOY and any(
                r.redeploy is not None and r.seq > stop.seq and r.request_id in self.answered for r in self.rebases):
            return None
        return stop

    def newest_seq(self, kind: type[StopRequest] | type[StartRequest]) -> int:
        """The seq of the newest request of `kind`, -1 when none."""
        found = self.stops if kind is StopRequest else self.starts
        return found[-1].seq if found else -1
