"""Stopping a live stream from anywhere: a STOP_REQUESTED entry in the pipeline's handoff log, which the stream
reads wherever it runs (no pid, no host, no signal), then a wait for its STOPPED. Between a served stream's restarts
(none runs, and the last one did not stop cleanly) the request names no lease: it keeps `switchyard serve` from
starting the next one until `switchyard start`."""

from __future__ import annotations

import logging

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff.clock import SYSTEM, Clock, utc_now
from switchyard.state_handoff.control import details, lease, requests
from switchyard.state_handoff.control.answers import NoAnswer, await_answer
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import Phase, Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def stop_stream(tables: Tables, timeout_s: float = 300.0, out=logger.info, requested_by: str = "switchyard stop",
                clock: Clock = SYSTEM) -> LogEntry | requests.StopRequest | None:
    """Ask the pipeline's running stream to stop cleanly (it drains and logs STOPPED) and wait for it; returns the
    STOPPED entry, or None when the process ended without one (it failed: see the handoff log). With no stream
    running but one expected to run again (between a served stream's restarts), the stop request it records."""
    view = PipelineView.read(tables)
    owner = view.owner
    if owner is None and view.handoff is not None and view.phase not in (Phase.STOPPED, Phase.STOP_REQUESTED):
        asked = requests.ask(tables, requests.StopRequest(handoff_id=view.handoff.handoff_id,
                                                          requested_by=requested_by))
        out(f"stop {tables.pipeline}: no stream runs now ({view.phase}); STOP_REQUESTED (seq {asked.seq}): "
            "`switchyard serve` starts none until `switchyard start`")
        return asked
    if owner is None or owner.command != lease.STREAM:
        raise UserError(f"pipeline {tables.pipeline} has no running stream"
                        + (f" (it is owned by `{owner.command}`)" if owner else "") + ": nothing to stop")
    if view.handoff is None:  # the stream took the lease, then found nothing to stream: it exits by itself
        raise UserError(f"pipeline {tables.pipeline} has no committed handoff, so {owner.describe(utc_now())} has "
                        "nothing to stream and exits by itself: nothing to stop")
    # the stream it is for: the one holding this lease (a stream always runs the latest handoff)
    asked = requests.ask(tables, requests.StopRequest(handoff_id=view.handoff.handoff_id, requested_by=requested_by,
                                                      lease_id=owner.lease_id))
    out(f"stop {tables.pipeline}: asked the stream ({owner.describe(utc_now())}) to stop; waiting for it to drain")

    def ended(seen: PipelineView) -> tuple[LogEntry | None] | None:
        """(STOPPED,) once logged; (None,) when the stream let its lease go without one (the view reads the lease
        before the log, and a stream logs STOPPED before it lets go)."""
        since = seen.since(asked.seq)
        stopped = [e for e in since if e.status == Status.STOPPED]
        if stopped:
            return (stopped[-1],)
        if seen.owner is None:  # gone without STOPPED: it failed on the way out
            failed = [e for e in since if e.status == Status.FAILED]
            if failed:
                warnings_to(out)(f"stop {tables.pipeline}: the stream failed on the way out: "
                                 f"{details.of(failed[-1]).reason}")
            return (None,)
        return None

    try:
        return await_answer(lambda: PipelineView.read(tables), ended, timeout_s, clock)[0]
    except NoAnswer:
        raise UserError(f"the stream of pipeline {tables.pipeline} ({owner.describe(utc_now())}) did not stop within "
                        f"{timeout_s:.0f}s: see `switchyard status`, or stop its process") from None
