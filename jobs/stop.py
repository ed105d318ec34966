"""Stopping a live stream from anywhere: a STOP_REQUESTED entry in the pipeline's handoff log, which the stream
reads wherever it runs (no pid, no host, no signal), then a wait for its STOPPED."""

from __future__ import annotations

import logging
import time

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff.control import details, handoff_log, lease, requests
from switchyard.state_handoff.control.clock import utc_now
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def stop_stream(tables: Tables, timeout_s: float = 300.0, out=logger.info, requested_by: str = "switchyard stop"):
    """Ask the pipeline's running stream to stop cleanly (it drains and logs STOPPED) and wait for it; returns the
    STOPPED entry, or None when the process ended without one (it failed: see the handoff log)."""
    owner = lease.owner(tables)
    if owner is None or owner.command != lease.STREAM:
        raise UserError(f"pipeline {tables.pipeline} has no running stream"
                        + (f" (it is owned by `{owner.command}`)" if owner else "") + ": nothing to stop")
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)  # a stream always runs the latest
    if handoff is None:  # the stream took the lease, then found nothing to stream: it exits by itself
        raise UserError(f"pipeline {tables.pipeline} has no committed handoff, so {owner.describe(utc_now())} has "
                        "nothing to stream and exits by itself: nothing to stop")
    # the stream it is for: the one holding this lease
    asked = requests.ask(tables, Status.STOP_REQUESTED, handoff.handoff_id, requested_by, lease_id=owner.lease_id)
    out(f"stop {tables.pipeline}: asked the stream ({owner.describe(utc_now())}) to stop; waiting for it to drain")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gone = lease.owner(tables) is None  # before the log: STOPPED is written before the lease is let go
        since = [e for e in handoff_log.entries(tables) if e.seq > asked.seq]
        stopped = [e for e in since if e.status == Status.STOPPED]
        if stopped:
            return stopped[-1]
        if gone:  # gone without STOPPED: it failed on the way out
            failed = [e for e in since if e.status == Status.FAILED]
            if failed:
                warnings_to(out)(f"stop {tables.pipeline}: the stream failed on the way out: "
                                 f"{details.of(failed[-1]).reason}")
            return None
        time.sleep(1.0)
    raise UserError(f"the stream of pipeline {tables.pipeline} ({owner.describe(utc_now())}) did not stop within "
                    f"{timeout_s:.0f}s: see `switchyard status`, or stop its process")


def stop_requested(entries: list, lease_id: str) -> requests.Request | None:
    """The STOP_REQUESTED for the stream holding lease `lease_id` (one for an earlier stream, which ended without
    answering it, never stops a later one), or None."""
    return next((r for r in requests.of_kind(entries, Status.STOP_REQUESTED) if r.fields.get("lease_id") == lease_id),
                None)
