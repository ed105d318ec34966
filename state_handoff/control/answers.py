"""Waiting for a request's answer: one loop for every "ask, then watch the log" (stop, start, a rebase asked of the
live stream), over an injectable clock, as Kafka Streams' `waitOnState` waits over its `Time`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from switchyard.state_handoff.clock import SYSTEM, Clock
from switchyard.state_handoff.control import details
from switchyard.state_handoff.control.handoffs import Handoff, from_entry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

T = TypeVar("T")
POLL_S = 1.0


class NoAnswer(Exception):
    """No answer came within the wait: the caller says what to look at."""


def await_answer(read_view: Callable[[], PipelineView], until: Callable[[PipelineView], T | None], timeout_s: float,
                 clock: Clock = SYSTEM, poll_s: float = POLL_S) -> T:
    """The first answer `until` finds in a view of the pipeline, read afresh each `poll_s` seconds, as long as
    `timeout_s` allows (NoAnswer after). `until` returns None while there is none yet, and may raise to end the
    wait with a refusal."""
    deadline = clock.monotonic() + timeout_s
    while True:
        answer = until(read_view())
        if answer is not None:
            return answer
        if clock.monotonic() >= deadline:
            raise NoAnswer(f"no answer within {timeout_s:.0f}s")
        clock.sleep(poll_s)


def rebase_answer(request_id: str, shown: set[int], out) -> Callable[[PipelineView], Handoff | None]:
    """The answer to rebase request `request_id`: its new handoff once SWITCHED (the first batch committed); a refusal
    or failure ends the wait (UserError). Each step of the way is shown once through `out`."""

    def answer(view: PipelineView) -> Handoff | None:
        committed = view.ledger.answered.get(request_id)
        for e in view.entries:
            ours = details.request_id(e) == request_id or (
                committed is not None and e.handoff_id == committed.handoff_id)
            if not ours or e.seq in shown:
                continue
            shown.add(e.seq)
            if e.status == Status.REBASE_REFUSED:
                raise UserError(details.of(e).reason)
            if e.status in (Status.FAILED, Status.RECONCILIATION_FAILED, Status.REBASE_ABANDONED):
                raise UserError(f"the rebase failed: {details.of(e).reason}")
            out(f"  {e.status} {e.handoff_id}")
            if e.status == Status.SWITCHED:
                return from_entry(committed)
        return None

    return answer


def wait_for_rebase(tables: Tables, request_id: str, timeout_s: float, out=logger.info,
                    clock: Clock = SYSTEM) -> Handoff:
    """Until the rebase asked for is SWITCHED (its new handoff's first batch committed); FAILED ends it."""
    try:
        return await_answer(lambda: PipelineView.read(tables), rebase_answer(request_id, set(), out), timeout_s, clock)
    except NoAnswer:
        raise UserError(f"the stream did not finish the rebase within {timeout_s:.0f}s: see `switchyard status`") \
            from None
