"""Requests in a pipeline's handoff log, one way to write them and one way to read them. A request asks whoever runs
the pipeline for something, from any host, with no pid, host or signal of the one that answers:

- REBASE_REQUESTED: rebase at a cut (the live stream pauses for it, or the next `stream` or `rebase` runs it); open
  until a HANDOFF_COMMITTED at its cut answers it (jobs/rebase/requests.py says when else);
- STOP_REQUESTED: the stream holding one lease (`lease_id`) stops cleanly;
- START_REQUESTED: `switchyard serve` runs the stream again, lifting an earlier stop request or a hold-down;
- PREVIOUS_DROPPED: the definition a redeploy replaced (its request, `redeploy_request`) is no longer kept for
  `switchyard rollback`: the files of its tiles go with the table's next vacuum.

Each records its id, who asked (`requested_by`) and from which host and process, beside its own fields."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import REQUESTS, Status
from switchyard.state_handoff.tables import Tables

_COMMON = ("request_id", "requested_by", "host", "pid")


@dataclass(frozen=True)
class Request:
    """One request as the log holds it: `fields` are its kind's own (a rebase's reason and days, a stop's lease)."""

    kind: Status
    request_id: str | None
    requested_by: str | None
    host: str | None
    pid: int | None
    handoff_id: str
    seq: int
    fields: dict = field(default_factory=dict)

    def as_details(self) -> dict:
        """What a reader of the entry's details sees: the common fields and the kind's own, flat."""
        return {"request_id": self.request_id, "requested_by": self.requested_by, "host": self.host,
                "pid": self.pid, **self.fields}

    def who(self) -> str:
        return f"{self.requested_by} (pid {self.pid} on host {self.host})"


def ask(tables: Tables, kind: Status, handoff_id: str, requested_by: str, **fields) -> Request:
    """Append a request of `kind` on handoff `handoff_id`; the request as written."""
    if kind not in REQUESTS:
        raise ValueError(f"{kind} is not a request")
    details = {"request_id": uuid.uuid4().hex[:12], "requested_by": requested_by, "host": socket.gethostname(),
               "pid": os.getpid(), **fields}
    return read(handoff_log.append(tables, handoff_id, kind, details=details))


def read(entry: LogEntry) -> Request | None:
    """The request an entry holds, or None for an entry that is not a request."""
    if entry.status not in REQUESTS:
        return None
    details = handoff_log.details(entry)
    return Request(entry.status, details.get("request_id"), details.get("requested_by"), details.get("host"),
                   details.get("pid"), entry.handoff_id, entry.seq,
                   {k: v for k, v in details.items() if k not in _COMMON})


def of_kind(entries, kind: Status) -> list[Request]:
    """The requests of `kind` among `entries`, in the log's order."""
    return [read(e) for e in entries if e.status == kind]
