"""What decides a rebase request's way on without Spark: whether the paused stream may still resume, whether a
stream ended with updates `state` may lack, and giving a request up (`--abandon`). Which requests are open, paused or
answered is the ledger's (state_handoff/control/ledger.py)."""

from __future__ import annotations

import logging

from switchyard.state_handoff.control import details, handoff_log, lease, lifecycle
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import RebaseRequest
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep, storage
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import checkpoint_incarnation, last_committed_batch, last_planned_batch
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


PAUSED_FAILURES = 3  # failures of a paused rebase a stream retries by itself before it asks for an operator


def refuse_if_failing(view: PipelineView, request: RebaseRequest) -> None:
    """A stream does not run again by itself a paused rebase that failed PAUSED_FAILURES times since the last start
    request: refused in one line (exit 2, so `switchyard serve` holds the stream down and its alert fires) naming the
    way on. Each attempt can take minutes, so a bound on attempts, not a window of time."""
    failures = view.ledger.failures_after_pause(request)
    if request.paused is not None and failures >= PAUSED_FAILURES:
        raise UserError(f"the paused rebase of {view.tables.pipeline} (request {request.request_id}) failed {failures} "
                        "times at its cut (its FAILED entries say why, `switchyard status`): fix that, then "
                        "`switchyard start` (or `switchyard rebase`) runs it again; or `switchyard rebase --abandon` "
                        "gives it up while the paused stream can resume")


def resumable(tables: Tables, handoff: Handoff, paths: StreamPaths) -> bool:
    """The paused stream can stream on: no events batch is recorded past the one its checkpoint last planned (an
    earlier attempt's catch-up writes its batches there, and the stream would plan those ids over other ranges)."""
    planned = last_planned_batch(paths.events_checkpoint)
    incarnation = checkpoint_incarnation(paths.events_checkpoint) or "unstreamed"
    return not any(b.batch_id > (-1 if planned is None else planned)
                   for b in stream_progress.batches(tables, handoff.handoff_id) if b.incarnation == incarnation)


def unsettled_stream(view: PipelineView) -> tuple[str, str] | None:
    """(the current handoff, how its stream ended) when `state` may lack updates that stream sent (none runs: the
    caller found no stream live): the log's last word on it is that its stream runs (killed without a stop, maybe
    after sending a batch's updates and before `state` applied them), or it failed (its state query may have lagged
    the updates sent when it did), or it stopped with its keyed
    query's last planned batch uncommitted (some of that batch's updates sent and applied, its checkpoint before it).
    Compared with that `state`, a rebase would find differences the stream never made; a restart of the stream
    replays the planned batch and drains `state`."""
    handoff = view.handoff
    if handoff is None:
        return None
    history = view.history(handoff.handoff_id)
    if lifecycle.current(history) in lifecycle.RUNNING:
        return handoff.handoff_id, "ended without a stop"
    last = next((e for e in reversed(view.entries) if e.handoff_id == handoff.handoff_id
                 and e.status not in lifecycle.NOTES | lifecycle.REQUESTS), None)
    if last is not None and last.status == Status.FAILED and details.of(last).phase == "stream":
        return handoff.handoff_id, "ended FAILED"  # its state query may not have applied every update sent
    keyed = StreamPaths.of(view.tables, handoff.handoff_id).keyed_checkpoint
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
        view = PipelineView.read(tables)
        request = view.ledger.open_rebase
        if request is None:
            raise UserError(f"pipeline {tables.pipeline} has no open rebase request: nothing to abandon")
        handoff = view.current_handoff
        reason = f"abandoned by {requested_by}"
        if request.paused is None:
            handoff_log.append(tables, handoff.handoff_id, Status.REBASE_REFUSED,
                               details=details.RebaseRefused(request_id=request.request_id, reason=reason))
            out(f"rebase {tables.pipeline}: request {request.request_id} abandoned before its pause; handoff "
                f"{handoff.handoff_id} goes on as it was")
            return
        paths = StreamPaths.of(tables, handoff.handoff_id)
        finish = "`switchyard stream` (or `switchyard rebase`) finishes it at its cut once what stopped it is fixed"
        if view.ledger.committed_backfill_for(request.request_id) is not None:
            raise UserError(f"the paused rebase of {tables.pipeline} (request {request.request_id}) has already "
                            f"committed the recomputed state at its cut, so it cannot be abandoned: {finish}")
        if not resumable(tables, handoff, paths):
            raise UserError(f"the paused rebase of {tables.pipeline} (request {request.request_id}) has already "
                            f"written the events path past the paused stream's checkpoint, so handoff "
                            f"{handoff.handoff_id} cannot stream again and the rebase cannot be abandoned: {finish}")
        _restore_tables(tables, request)
        handoff_log.append(tables, handoff.handoff_id, Status.REBASE_ABANDONED, details=details.RebaseAbandoned(
            request_id=request.request_id, reason=reason, cut=request.paused.as_details()))
    out(f"rebase {tables.pipeline}: the paused rebase (request {request.request_id}) is abandoned; "
        f"`switchyard stream` resumes handoff {handoff.handoff_id} from its checkpoint with its streamed state")


def _restore_tables(tables: Tables, request: RebaseRequest) -> None:
    """A redeploy given up: its tiles, of the changed definition, replaced the whole table; the table is restored
    to its version before them, so the recorded definition's next rebase merges its own tiles. So is `dead_letter`,
    which a redeploy whose records parse otherwise makes again (jobs/rebase/reparse.py)."""
    if request.redeploy is None:
        return
    for path, before in ((tables.tiles, request.redeploy.tiles_version),
                         (tables.dead_letter, request.redeploy.dead_letter_version)):
        if before is not None and storage.exists(storage.join(path, "_delta_log")):
            delta_upkeep.restore(path, before)
