"""Starting a served stream from anywhere: a START_REQUESTED entry in the pipeline's handoff log, which `switchyard
serve` reads wherever it runs, then a wait for the stream it starts. What asks (Dagster's `start_stream` job and a
served pipeline's `stream` asset) ends once the stream runs; the stream lives on under the service."""

from __future__ import annotations

import logging

from switchyard.state_handoff.clock import SYSTEM, Clock, utc_now
from switchyard.state_handoff.control.answers import NoAnswer, await_answer
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import request_start
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import Failed, UserError
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def start_served(tables: Tables, requested_by: str, timeout_s: float = 300.0, out=logger.info,
                 clock: Clock = SYSTEM) -> LogEntry | None:
    """Ask the service that serves the pipeline to run its stream, and wait until a stream runs: returns the
    STREAM_STARTED entry of the stream it started, or None when one was running already."""
    view = PipelineView.read(tables)
    if view.streaming:
        out(f"start {tables.pipeline}: already streaming ({view.owner.describe(utc_now())})")
        return None
    try:
        asked = request_start(view, requested_by)
    except UserError:
        if PipelineView.read(tables).streaming:  # the service started it in the meantime
            return None
        raise
    out(f"start {tables.pipeline}: START_REQUESTED (seq {asked.seq}); waiting for `switchyard serve` to start it")

    def started(seen: PipelineView) -> LogEntry | None:
        since = seen.since(asked.seq)
        entries = [e for e in since if e.status == Status.STREAM_STARTED]
        if entries and seen.streaming:
            out(f"start {tables.pipeline}: the stream runs ({seen.owner.describe(utc_now())})")
            return entries[-1]
        stopped = [e for e in since if e.status == Status.STOP_REQUESTED]
        if stopped:
            raise Failed(f"pipeline {tables.pipeline}: a stop request (seq {stopped[-1].seq}) came after the start "
                         "request: not started")
        return None

    try:
        return await_answer(lambda: PipelineView.read(tables), started, timeout_s, clock)
    except NoAnswer:
        raise Failed(f"no stream of pipeline {tables.pipeline} started within {timeout_s:.0f}s of the start request "
                     f"(seq {asked.seq}): is `switchyard serve --pipeline {tables.pipeline}` running against this "
                     "warehouse? Its log says why a stream stays down") from None
