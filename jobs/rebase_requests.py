"""A rebase's requests in the handoff log, read and written without Spark: a REBASE_REQUESTED asks the live stream
(or the next `stream`) for a rebase; the request stays open until a HANDOFF_COMMITTED at its cut answers it, or, before
its pause, a REBASE_REFUSED (jobs/rebase.py runs it)."""

from __future__ import annotations

import logging
import time

from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.handoff import Handoff, current_handoff, from_entry
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def request_rebase(tables: Tables, reason: str, requested_by: str, days: tuple[str | None, str | None] = (None, None),
                   figures: dict | None = None, accept_differences: bool = False) -> str:
    """Ask the live stream to rebase; returns the request id to wait for."""
    handoff = current_handoff(tables)
    if handoff is None:
        raise UserError(f"pipeline {tables.pipeline} has no committed handoff: there is no stream to rebase")
    asked = requests.ask(tables, Status.REBASE_REQUESTED, handoff.handoff_id, requested_by, reason=reason,
                         **{"from": days[0], "to": days[1]}, **(figures or {}),
                         **({"accept_differences": True} if accept_differences else {}))
    return asked.request_id


def open_request(tables: Tables, entries: list | None = None) -> dict | None:
    """The oldest REBASE_REQUESTED that no HANDOFF_COMMITTED answered yet, with its PAUSED details (`paused`, a
    details.Paused) when a pause began it: what a (re)starting stream must do before it streams. A REBASE_REFUSED
    (or, in logs written before it, a FAILED) answers a request only before its pause: from the pause on, the
    catch-up may have written the events path past the paused stream's checkpoint, so the only ways on are the
    handoff at the recorded cut and, while the paused stream is still resumable, a REBASE_ABANDONED. `entries`:
    the log as the caller just read it."""
    entries = handoff_log.entries(tables) if entries is None else entries
    answered, failed, paused = set(), set(), {}
    for e in entries:
        request_id = details.request_id(e)
        if request_id is None:
            continue
        if e.status in (Status.HANDOFF_COMMITTED, Status.REBASE_REFUSED, Status.REBASE_ABANDONED):
            answered.add(request_id)
        elif e.status == Status.FAILED:
            failed.add(request_id)
        elif e.status == Status.RECONCILIATION_FAILED and details.of(e).resumable:
            answered.add(request_id)  # nothing replaced, nothing written past the stream's checkpoint
        elif e.status == Status.PAUSED:
            paused[request_id] = details.of(e)
    answered |= failed - set(paused)
    for asked in requests.of_kind(entries, Status.REBASE_REQUESTED):
        if asked.request_id in answered:
            continue
        request = asked.as_details()
        return {**request, "paused": paused[asked.request_id]} if asked.request_id in paused else request
    return None


def wait_for_rebase(tables: Tables, request_id: str, timeout_s: float, out=logger.info) -> Handoff:
    """Until the rebase asked for is SWITCHED (its new handoff's first batch committed); FAILED ends it."""
    deadline = time.monotonic() + timeout_s
    shown: set[int] = set()
    while time.monotonic() < deadline:
        entries = handoff_log.entries(tables)
        committed = next((e for e in entries if e.status == Status.HANDOFF_COMMITTED
                          and details.request_id(e) == request_id), None)
        for e in entries:
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
        time.sleep(1.0)
    raise UserError(f"the stream did not finish the rebase within {timeout_s:.0f}s: see `switchyard status`")
