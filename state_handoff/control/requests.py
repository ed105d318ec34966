"""Requests in a pipeline's handoff log, typed: one frozen class per kind, written in one place (`ask`) and read in
one place (`read`). A request asks whoever runs the pipeline for something, from any host, with no pid, host or
signal of the one that answers:

- RebaseRequest (REBASE_REQUESTED): rebase at a cut (the live stream pauses for it, or the next `stream` or
  `rebase` runs it); a redeploy's carries its RedeployPlan. Which are open, paused or ended: control/ledger.py;
- StopRequest (STOP_REQUESTED): the stream holding one lease (`lease_id`) stops cleanly;
- StartRequest (START_REQUESTED): `switchyard serve` runs the stream again, lifting an earlier stop or a hold-down;
- PreviousDropped (PREVIOUS_DROPPED): the definition a redeploy replaced (`redeploy_request`) is no longer kept for
  `switchyard rollback`: the files of its tiles go with the table's next vacuum.

Each records its id, who asked (`requested_by`) and from which host and process, beside its own fields. `Cut`, the
per-partition offsets a rebase pauses at, lives here too: a paused request carries it."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field, fields, replace
from typing import ClassVar

from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import REQUESTS, Status
from switchyard.state_handoff.tables import Tables


@dataclass(frozen=True)
class Cut:
    """Where a rebase paused the stream: `offsets`, the exclusive end per partition (the next handoff starts here);
    where the keyed and the events query's last committed batches ended; and the `state` version holding the drained
    streamed state (at `keyed`), which the reconciliation folds [keyed, cut) into however often the rebase runs
    again after the recomputed state replaced it."""

    offsets: dict[int, int]
    keyed: dict[int, int]
    events: dict[int, int]
    state_version: int | None = None

    def as_details(self) -> dict:
        return {**{name: {str(p): o for p, o in sorted(getattr(self, name).items())}
                   for name in ("offsets", "keyed", "events")}, "state_version": self.state_version}

    @staticmethod
    def from_details(recorded: dict) -> Cut:
        return Cut(*({int(p): int(o) for p, o in recorded.get(name, {}).items()}
                     for name in ("offsets", "keyed", "events")),
                   state_version=recorded.get("state_version"))


@dataclass(frozen=True)
class RedeployPlan:
    """A redeploy's (or rollback's) plan, recorded with its request: the definition `version` it switches in, the
    `record` of the definition it replaces (language/definition.py's record), the `tiles` and `dead_letter` versions
    before it (what `rebase --abandon` restores), and the tiles made `beside` the live stream (jobs/rebase/beside.py's
    description of them, None when every day is tiled at the cut)."""

    version: str
    record: dict
    tiles_version: int | None = None
    dead_letter_version: int | None = None
    beside: dict | None = None

    def as_details(self) -> dict:
        return {"version": self.version, "record": self.record, "tiles_version": self.tiles_version,
                "dead_letter_version": self.dead_letter_version, "beside": self.beside}

    @staticmethod
    def from_details(recorded: dict) -> RedeployPlan:
        return RedeployPlan(recorded["version"], recorded["record"], recorded.get("tiles_version"),
                            recorded.get("dead_letter_version"), recorded.get("beside") or None)


@dataclass(frozen=True, kw_only=True)
class Request:
    """What every request records: its id, who asked and from where; `handoff_id` and `seq` of its entry."""

    KIND: ClassVar[Status]
    request_id: str = ""  # given by `ask`
    requested_by: str | None = None
    host: str | None = None
    pid: int | None = None
    handoff_id: str = ""
    seq: int = -1

    def who(self) -> str:
        return f"{self.requested_by} (pid {self.pid} on host {self.host})"

    def own_details(self) -> dict:
        """The kind's own fields, as the entry's JSON holds them."""
        return {}

    @classmethod
    def own_fields(cls, recorded: dict) -> dict:
        """The kind's own fields, from the entry's JSON."""
        return {}


@dataclass(frozen=True, kw_only=True)
class RebaseRequest(Request):
    """Rebase at a cut. `days`: the archive days to tile again (ISO dates, or None); `figures`: what decided a switch
    back (the lag, the threshold, the estimate), for status and Dagster; `redeploy`: the plan of a redeploy or
    rollback. `paused`: the cut, once a PAUSED began the rebase (the ledger fills it; the request as written has
    none)."""

    KIND: ClassVar = Status.REBASE_REQUESTED
    reason: str | None = None
    days: tuple[str | None, str | None] = (None, None)
    accept_differences: bool = False
    figures: dict = field(default_factory=dict)
    redeploy: RedeployPlan | None = None
    paused: Cut | None = None

    def own_details(self) -> dict:
        return {"reason": self.reason, "from": self.days[0], "to": self.days[1], **self.figures,
                **({"accept_differences": True} if self.accept_differences else {}),
                **({"redeploy": self.redeploy.as_details()} if self.redeploy else {})}

    @classmethod
    def own_fields(cls, recorded: dict) -> dict:
        named = {"reason", "from", "to", "accept_differences", "redeploy", *_COMMON}
        return {"reason": recorded.get("reason"), "days": (recorded.get("from"), recorded.get("to")),
                "accept_differences": bool(recorded.get("accept_differences")),
                "redeploy": RedeployPlan.from_details(recorded["redeploy"]) if recorded.get("redeploy") else None,
                "figures": {k: v for k, v in recorded.items() if k not in named}}

    def accepting(self, accept_differences: bool) -> RebaseRequest:
        """The same request, its differences accepted when `accept_differences` (a rerun's flag adds to the
        recorded one)."""
        return replace(self, accept_differences=self.accept_differences or accept_differences)


@dataclass(frozen=True, kw_only=True)
class StopRequest(Request):
    """Stop the stream holding lease `lease_id`: one for an earlier stream never stops a later one."""

    KIND: ClassVar = Status.STOP_REQUESTED
    lease_id: str | None = None

    def own_details(self) -> dict:
        return {"lease_id": self.lease_id}

    @classmethod
    def own_fields(cls, recorded: dict) -> dict:
        return {"lease_id": recorded.get("lease_id")}


@dataclass(frozen=True, kw_only=True)
class StartRequest(Request):
    """Run the pipeline's stream again under `switchyard serve`."""

    KIND: ClassVar = Status.START_REQUESTED


@dataclass(frozen=True, kw_only=True)
class PreviousDropped(Request):
    """The definition redeploy `redeploy_request` replaced is let go; its tiles were `tiles` version
    `tiles_version`."""

    KIND: ClassVar = Status.PREVIOUS_DROPPED
    redeploy_request: str | None = None
    tiles_version: int | None = None

    def own_details(self) -> dict:
        return {"redeploy_request": self.redeploy_request, "tiles_version": self.tiles_version}

    @classmethod
    def own_fields(cls, recorded: dict) -> dict:
        return {"redeploy_request": recorded.get("redeploy_request"), "tiles_version": recorded.get("tiles_version")}


REDEPLOY = "switchyard redeploy"  # who asks for a redeploy's stop, rebase and start

KINDS: dict[Status, type[Request]] = {k.KIND: k for k in (RebaseRequest, StopRequest, StartRequest, PreviousDropped)}
_COMMON = tuple(f.name for f in fields(Request) if f.name not in ("handoff_id", "seq"))
assert set(KINDS) == set(REQUESTS), "every request status has its class"


def ask(tables: Tables, request: Request) -> Request:
    """Append `request` (its id, host and pid are given here; `handoff_id` names the handoff it is asked on);
    the request as written, with its entry's seq."""
    asked = replace(request, request_id=uuid.uuid4().hex[:12], host=socket.gethostname(), pid=os.getpid())
    details = {"request_id": asked.request_id, "requested_by": asked.requested_by, "host": asked.host,
               "pid": asked.pid, **asked.own_details()}
    return read(handoff_log.append(tables, asked.handoff_id, asked.KIND, details=details))


def read(entry: LogEntry) -> Request | None:
    """The request an entry holds, or None for an entry that is not a request."""
    kind = KINDS.get(entry.status)
    if kind is None:
        return None
    recorded = handoff_log.details(entry)
    return kind(**{name: recorded.get(name) for name in _COMMON}, handoff_id=entry.handoff_id, seq=entry.seq,
                **kind.own_fields(recorded))


def as_details(request: Request) -> dict:
    """What a reader of the entry's details sees (Dagster's metadata): the common fields and the kind's own, flat."""
    return {**{name: getattr(request, name) for name in _COMMON}, **request.own_details()}


def request_rebase(view, requested_by: str, reason: str, days: tuple[str | None, str | None] = (None, None),
                   figures: dict | None = None, accept_differences: bool = False,
                   redeploy: RedeployPlan | None = None) -> RebaseRequest:
    """Ask the live stream (or the next `stream`) to rebase the current handoff of `view`'s pipeline."""
    from switchyard.state_handoff.errors import UserError

    handoff = view.handoff
    if handoff is None:
        raise UserError(f"pipeline {view.tables.pipeline} has no committed handoff: there is no stream to rebase")
    return ask(view.tables, RebaseRequest(handoff_id=handoff.handoff_id, requested_by=requested_by, reason=reason,
                                          days=days, figures=figures or {}, accept_differences=accept_differences,
                                          redeploy=redeploy))


def request_start(view, requested_by: str = "switchyard start") -> StartRequest:
    """Ask `switchyard serve` to run the pipeline's stream again: a START_REQUESTED on its current handoff."""
    from switchyard.state_handoff.errors import UserError

    pipeline = view.tables.pipeline
    if view.handoff is None:
        raise UserError(f"pipeline {pipeline} has no committed handoff: run `switchyard handoff` first")
    if view.streaming:
        raise UserError(f"pipeline {pipeline} is already streaming (pid {view.owner.owner_pid} on host "
                        f"{view.owner.owner_host}): nothing to start")
    return ask(view.tables, StartRequest(handoff_id=view.handoff.handoff_id, requested_by=requested_by))
