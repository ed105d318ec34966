"""A rebase's requests in the handoff log, read and written without Spark: a REBASE_REQUESTED asks the live stream
(or the next `stream`) for a rebase; the request stays open until a HANDOFF_COMMITTED at its cut answers it, or, before
its pause, a REBASE_REFUSED (jobs/rebase/run.py runs it). Also what decides a request's way on without Spark: whether the
paused stream may still resume, whether a stream ended with updates `state` may lack, and giving a request up
(`--abandon`)."""

from __future__ import annotations

import logging
import time

from switchyard.state_handoff.control import details, handoff_log, lease, lifecycle, requests
from switchyard.state_handoff.control.handoffs import Handoff, current_handoff, from_entry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep, storage
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import checkpoint_incarnation, last_committed_batch, last_planned_batch
from switchyard.state_handoff.stream.layout import StreamPaths
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


def committed_backfill_for(tables: Tables, request_id: str):
    """The BACKFILL_COMMITTED a rebase (or redeploy) wrote at its cut for request `request_id`, or None yet."""
    for entry in reversed(handoff_log.entries(tables)):
        if entry.status == Status.BACKFILL_COMMITTED and \
                (details.of(entry).at_cut or {}).get("request_id") == request_id:
            return entry
    return None


def resumable(tables: Tables, handoff: Handoff, paths: StreamPaths) -> bool:
    """The paused stream can stream on: no events batch is recorded past the one its checkpoint last planned (an
    earlier attempt's catch-up writes its batches there, and the stream would plan those ids over other ranges)."""
    planned = last_planned_batch(paths.events_checkpoint)
    incarnation = checkpoint_incarnation(paths.events_checkpoint) or "unstreamed"
    return not any(b.batch_id > (-1 if planned is None else planned)
                   for b in stream_progress.batches(tables, handoff.handoff_id) if b.incarnation == incarnation)


def unsettled_stream(tables: Tables) -> tuple[str, str] | None:
    """(the current handoff, how its stream ended) when `state` may lack updates that stream sent (none runs: the
    caller found no stream live): the log's last word on it is that its stream runs (killed without a stop, maybe
    after sending a batch's updates and before `state` applied them), or it stopped (or failed) with its keyed
    query's last planned batch uncommitted (some of that batch's updates sent and applied, its checkpoint before it).
    Compared with that `state`, a rebase would find differences the stream never made; a restart of the stream
    replays the planned batch and drains `state`."""
    handoff = current_handoff(tables)
    if handoff is None:
        return None
    history = [e.status for e in handoff_log.entries(tables) if e.handoff_id == handoff.handoff_id]
    if lifecycle.current(history) in lifecycle.RUNNING:
        return handoff.handoff_id, "ended without a stop"
    keyed = StreamPaths.of(tables, handoff.handoff_id).keyed_checkpoint
    planned = last_planned_batch(keyed)
    if planned is not None and planned != last_committed_batch(keyed):
        return handoff.handoff_id, f"{lifecycle.current(history).lower()} in the middle of its keyed batch {planned}"
    return None


def abandon_rebase(tables: Tables, requested_by: str, out=logger.info) -> None:
    """Give up the open rebase request (`switchyard rebase --abandon`): one paused by a rebase that then failed or
    died, while the paused stream can still resume from its checkpoint (REBASE_ABANDONED; the next `stream` resumes
    the paused handoff with its streamed state), or one not yet paused (REBASE_REFUSED). Refused in one line when no
    request is open, a stream is live (it answers requests itself), or the rebase got too far to be given up."""
    with lease.hold(tables, requested_by):
        request = open_request(tables)
        if request is None:
            raise UserError(f"pipeline {tables.pipeline} has no open rebase request: nothing to abandon")
        handoff = current_handoff(tables)
        reason = f"abandoned by {requested_by}"
        if "paused" not in request:
            handoff_log.append(tables, handoff.handoff_id, Status.REBASE_REFUSED,
                               details=details.RebaseRefused(request_id=request["request_id"], reason=reason))
            out(f"rebase {tables.pipeline}: request {request['request_id']} abandoned before its pause; handoff "
                f"{handoff.handoff_id} goes on as it was")
            return
        paths = StreamPaths.of(tables, handoff.handoff_id)
        finish = "`switchyard stream` (or `switchyard rebase`) finishes it at its cut once what stopped it is fixed"
        if committed_backfill_for(tables, request["request_id"]) is not None:
            raise UserError(f"the paused rebase of {tables.pipeline} (request {request['request_id']}) has already "
                            f"committed the recomputed state at its cut, so it cannot be abandoned: {finish}")
        if not resumable(tables, handoff, paths):
            raise UserError(f"the paused rebase of {tables.pipeline} (request {request['request_id']}) has already "
                            f"written the events path past the paused stream's checkpoint, so handoff "
                            f"{handoff.handoff_id} cannot stream again and the rebase cannot be abandoned: {finish}")
        _restore_tables(tables, request)
        handoff_log.append(tables, handoff.handoff_id, Status.REBASE_ABANDONED, details=details.RebaseAbandoned(
            request_id=request["request_id"], reason=reason, cut=request["paused"].cut))
    out(f"rebase {tables.pipeline}: the paused rebase (request {request['request_id']}) is abandoned; "
        f"`switchyard stream` resumes handoff {handoff.handoff_id} from its checkpoint with its streamed state")


def _restore_tables(tables: Tables, request: dict) -> None:
    """A redeploy given up: its tiles, of the changed definition, replaced the whole table; the table is restored
    to its version before them, so the recorded definition's next rebase merges its own tiles. So is `dead_letter`,
    which a redeploy whose records parse otherwise makes again (jobs/rebase/reparse.py)."""
    redeploy = request.get("redeploy") or {}
    for path, before in ((tables.tiles, redeploy.get("tiles_version")),
                         (tables.dead_letter, redeploy.get("dead_letter_version"))):
        if before is not None and storage.exists(storage.join(path, "_delta_log")):
            delta_upkeep.restore(path, before)
