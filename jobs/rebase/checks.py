"""What a rebase checks before it pauses the stream, and the archive's lease it holds from then to its handoff: a
rebase that cannot have what it reads is refused (REBASE_REFUSED, in one line) with nothing paused, and the stream
streams on (jobs/rebase/run.py runs the rest)."""

from __future__ import annotations

import logging
import time
from contextlib import ExitStack

from switchyard.jobs.backfill import verify_archive
from switchyard.state_handoff.control import details, handoff_log, kafka_retention, lease
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import RebaseRequest
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import archive_meta
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.stream.checkpoints import committed_end_offsets, planned_end_offsets
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


class RebaseRefused(UserError):
    """A rebase refused before its pause (logged REBASE_REFUSED): nothing paused, the handoff goes on as it was."""


def check_before_pause(tables: Tables, bootstrap: str, handoff: Handoff, paths: StreamPaths) -> None:
    """Raise UserError, in one line, when the rebase could not read what it needs: an archive file missing or
    unreadable, or an offset it reads from Kafka deleted by retention (the Kafka range begins at the archive's cut;
    the reconciliation and the catch-up read from where the stream's readers ended, when that is lower, and take
    from the archive what Kafka deleted below its cut)."""
    verify_archive(tables)
    start = handoff.start_offsets
    keyed = committed_end_offsets(paths.keyed_checkpoint, handoff.topic) or {}
    events = planned_end_offsets(paths.events_checkpoint, handoff.topic) or {}
    cut = kafka_retention.archive_cut(tables)
    first = {int(p): int(o) for p, o in (archive_meta(tables.archive).get("first") or {}).items()}
    bounds = offset_bounds(bootstrap, handoff.topic)
    read_from = {p: min(keyed.get(p, start.get(p, 0)), events.get(p, start.get(p, 0))) for p in bounds}
    # what the readers need below the archive's cut, the archive serves when Kafka no longer holds it
    # (retained_or_archived_range); Kafka must hold the rest
    needed = {p: cut.get(p, 0) if first.get(p, 0) <= read_from[p] else min(cut.get(p, 0), read_from[p])
              for p in bounds}
    gone = kafka_retention.unretained(needed, bounds)
    if gone:
        ranges = ", ".join(f"partition {p} offsets {a}..{b - 1}" for p, (a, b) in gone.items())
        raise UserError(
            f"topic {handoff.topic} no longer retains what a rebase must read past the archive ({ranges} deleted by "
            "Kafka's retention, and the archive ends before them, so it can no longer cover them): the streamed "
            f"state stands and the stream goes on from handoff {handoff.handoff_id}; a rebase needs the archive to "
            "reach what Kafka retains: keep `switchyard archive` ahead of retention (`switchyard status` shows the "
            "margin per partition)")


def refuse_unless_ready(tables: Tables, bootstrap: str, handoff: Handoff, request: RebaseRequest) -> None:
    """check_before_pause for an open request not yet paused: a refusal answers it (REBASE_REFUSED, which leaves
    the handoff where it was) and raises RebaseRefused."""
    try:
        check_before_pause(tables, bootstrap, handoff, StreamPaths.of(tables, handoff.handoff_id))
    except UserError as err:
        _refuse(tables, handoff, request, err)


def _refuse(tables: Tables, handoff: Handoff, request: RebaseRequest, err: UserError) -> None:
    reason = f"rebase of {tables.pipeline} refused before its pause, nothing paused: {err}"
    handoff_log.append(tables, handoff.handoff_id, Status.REBASE_REFUSED,
                       details=details.RebaseRefused(request_id=request.request_id, reason=reason))
    raise RebaseRefused(reason) from None


def hold_archive(tables: Tables, handoff: Handoff, request: RebaseRequest, out=logger.info) -> ExitStack:
    """The archive's own lease, taken before the pause and held until the handoff at the cut, so that the archive's
    record the rebase reads at several steps (the days to tile, the archive's cut, the commit's accounting) is one
    record: an `archive` run meanwhile is refused, naming the rebase. An archive run holding it refuses a request
    not yet paused (REBASE_REFUSED: the stream streams on); a rebase already paused waits for the run to end."""
    held = ExitStack()
    waiting = False
    while True:
        try:
            held.enter_context(lease.hold(tables.archive_writer(), lease.REBASE))
            return held
        except UserError as err:
            if request.paused is None:
                _refuse(tables, handoff, request, UserError(f"the archive is being written: {err}; run the rebase "
                                                            "again once that archive run has ended"))
            if not waiting:
                out(f"rebase {tables.pipeline}: waiting for the archive run to end before finishing the paused "
                    f"rebase ({err})")
                waiting = True
            time.sleep(1.0)
