"""Rebase (beyond Flink): the way back from stream to backlog and forward again, at a cut.

A paused stream's two readers stopped where their last committed batches ended: the keyed query at K, the
events query at E, per partition. The cut C is the topic's end at the pause (at least K and E). Then:
1. the keyed state is recomputed sort-based from the archive's days plus the Kafka range [archive cut, C)
   read in batch and compared with the streamed state folded up to C (the reconciliation); a difference stops
   the rebase here, with nothing written at the cut (RECONCILIATION_FAILED: the paused stream streams on),
   unless the request accepts differences;
2. the events path catches up over [E, C) in batches (as many as the stream would take it in, bounded by
   jobs/rebase/cut.py's CATCH_UP_BATCH), with the stream's own sink and watermark, so dead letters, late records
   and windows are exactly the stream's at C (a final window is never re-emitted);
3. the recomputed state replaces the streamed one; BACKFILL_COMMITTED and HANDOFF_COMMITTED at C; a stream
   then seeds from the recomputed state.
Before the pause, everything the steps read is checked: the archive's files, and Kafka still retaining every
offset the steps read from it (from the archive's cut, or from where a reader ended when lower). A rebase that
cannot have them is refused then (REBASE_REFUSED, in one line), with nothing paused: the stream streams on.
From before the pause to the handoff at the cut the rebase holds the archive's own lease, so the archive's record
its steps read is one record: an `archive` run meanwhile is refused, naming the rebase.
Each step is idempotent, and the request stays open from the pause until the handoff at the cut: a rebase that
dies, or that a user error stops (logged FAILED, in one line), is finished at the same cut by the next `stream`
(or `rebase`), or given up by `rebase --abandon` (REBASE_ABANDONED) while the paused stream can still resume from
its checkpoint. Once the catch-up ran, the old handoff never streams again, so the batch ids it wrote past the
checkpoint are never planned by the stream's query over another range.

A redeploy (jobs/rebase/redeploy.py) is a rebase whose request carries a RedeployPlan: it runs under the changed
definition, what that changes found once (definition.diff, a DefinitionChange) and given to every step, whose tiles (made beside the live stream, or every day's now) replace the whole `tiles` table, and its
reconciliation compares only what both definitions declare alike; when the windows changed, the catch-up writes only
the dead letters and the windows are made again at the cut over all history; when its records parse otherwise, the
dead letters are made again over all history too (jobs/rebase/reparse.py) and nothing is compared. Under any other
definition it is refused.

Steps 1 and 2 and the commit at the cut run as steps that return values, and one commit that takes them
(jobs/rebase/at_cut.py); the cut itself, its records fetched and parsed once for steps 1 and 2, the events path's
catch-up to it and the streamed state folded up to it are jobs/rebase/cut.py.
The stream runs a rebase between two handoffs (jobs/stream/supervisor.py); of the stream it needs only the folder
layout and the checkpoints (state_handoff/stream/layout.py, state_handoff/stream/checkpoints.py) and the events sink
(jobs/sinks.py), so it never imports the stream.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime, timezone

from pyspark.sql import SparkSession

from switchyard.jobs.log import warnings_to
from switchyard.jobs.rebase.at_cut import RebaseAtCut, RebaseInterrupted, recompute_at_cut
from switchyard.jobs.rebase.checks import RebaseRefused, hold_archive, refuse_unless_ready
from switchyard.jobs.rebase.cut import pause_cut
from switchyard.jobs.rebase.reconciliation import ReconciliationFailed, described
from switchyard.jobs.rebase.rekey import publish_changed_keys, rekey_updates_topic
from switchyard.jobs.rebase.requests import resumable, unsettled_stream
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control.answers import wait_for_rebase
from switchyard.state_handoff.control.handoffs import Handoff, from_entry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import Cut, RebaseRequest, request_rebase
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import NotNow, UserError
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.definition import DefinitionChange
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

CUT = "cut"


def rebase_at_cut(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, handoff: Handoff,
                  paths: StreamPaths, cut: Cut, request: RebaseRequest, change: DefinitionChange,
                  out=logger.info, stop_asked=lambda: False) -> Handoff:
    """Steps 1-3 of the module docstring for a paused stream (`change`: what its request's definition changes);
    returns the new handoff at the cut."""
    started = time.monotonic()
    rebase = RebaseAtCut(pipeline, tables, bootstrap, handoff, paths, cut, request, change, stop_asked)
    backfill = _committed_backfill(tables, request)
    if backfill is None:
        reconciliation = recompute_at_cut(spark, rebase, out)
        backfill = _committed_backfill(tables, request)
        committed = details.of(backfill)
        if not committed.complete:
            raise UserError(f"the rebase's backfill does not cover the whole archive (not yet tiled per partition: "
                            f"{committed.records_not_backfilled}, skipped files: {committed.skipped_files}): "
                            "repair the archive")
        faults.reach("rebase.after_backfill")
    else:
        reconciliation = details.of(backfill).at_cut["reconciliation"]
    _report(pipeline, reconciliation, change, out)
    # the updates topic at the cut, before the handoff commits (again when a rerun finishes it: a tombstone, or a
    # key's whole state, sent twice changes nothing)
    if change.moves_updates_topic:
        rekey_updates_topic(spark, pipeline, tables, bootstrap, cut, change, backfill, out)
    else:
        publish_changed_keys(spark, pipeline, tables, bootstrap, cut, backfill, out)
    entry = handoff_log.append(
        tables, backfill.handoff_id, Status.HANDOFF_COMMITTED, state_version=backfill.state_version,
        start_offsets=cut.offsets, backlog_watermark=backfill.backlog_watermark,
        details=details.HandoffCommitted(
            topic=handoff.topic, boundary_mode=CUT, boundary={str(p): o - 1 for p, o in cut.offsets.items()},
            request_id=request.request_id, previous_handoff=handoff.handoff_id, reconciliation=reconciliation,
            **definition.as_details(pipeline), rebase_s=round(time.monotonic() - started, 3)))
    return from_entry(entry)


def _report(pipeline: Pipeline, reconciliation: dict, change: DefinitionChange, out) -> None:
    """The reconciliation in one line: the differences accepted, why nothing was compared, or that the two agree."""
    if reconciliation["keys_different"]:
        warnings_to(out)(f"rebase {pipeline.name}: RECONCILIATION: {reconciliation['keys_different']} of "
                         f"{reconciliation['keys_recomputed']} keys differ between the streamed and the recomputed "
                         f"state; {described(reconciliation)}")
    elif reconciliation.get("not_compared"):
        out(f"rebase {pipeline.name}: reconciliation not made: {reconciliation['not_compared']}; the dead letters "
            "were made again over all history, and the accounting counts every record once")
    else:
        out(f"rebase {pipeline.name}: reconciliation: the recomputed state equals the streamed state "
            + ("merged over all keys (the key changed)" if change.key_changed
               else f"({reconciliation['keys_recomputed']} keys)"))


def _committed_backfill(tables: Tables, request: RebaseRequest):
    """The BACKFILL_COMMITTED the rebase wrote at its cut, as the log holds it now (None: not yet)."""
    return PipelineView.read(tables).ledger.committed_backfill_for(request.request_id)


def run_rebase(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, handoff: Handoff,
               request: RebaseRequest, out=logger.info, checked: bool = False, stop_asked=lambda: False) -> Handoff:
    """A requested rebase of a handoff whose queries are stopped (drained, or never run in this process):
    pause at a cut unless a crash left one recorded, then the backlog phase to the cut and the handoff there.
    `checked`: the caller ran refuse_unless_ready a moment ago, while the queries still ran. The archive's lease is
    held throughout (hold_archive). `stop_asked`: a stop signal came; the rebase then stops between its steps, paused
    at its cut (RebaseInterrupted), for the next `stream` (or `rebase`) to finish."""
    with hold_archive(tables, handoff, request, out):
        return _rebase_holding_the_archive(spark, pipeline, tables, bootstrap, handoff, request, out, checked,
                                           stop_asked)


def _rebase_holding_the_archive(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str,
                                handoff: Handoff, request: RebaseRequest, out, checked: bool, stop_asked) -> Handoff:
    paths = StreamPaths.of(tables, handoff.handoff_id)
    refuse_other_definition(pipeline, tables, handoff, request)
    change = definition.diff(request.redeploy.record, pipeline) if request.redeploy else definition.unchanged(pipeline)
    if request.paused is not None:
        cut = request.paused
    else:
        if not checked:
            refuse_unless_ready(tables, bootstrap, handoff, request)
        cut = pause_cut(bootstrap, tables, handoff, paths)
        handoff_log.append(tables, handoff.handoff_id, Status.PAUSED, details=details.Paused(
            request_id=request.request_id, reason=request.reason, cut=cut.as_details()))
        out(f"PAUSED for a rebase ({request.reason}) at the cut "
            + ", ".join(f"p{p}:{o}" for p, o in sorted(cut.offsets.items())))
    faults.reach("rebase.after_pause")
    if stop_asked():
        raise RebaseInterrupted("stopped after its pause, paused at its cut")
    try:
        return rebase_at_cut(spark, pipeline, tables, bootstrap, handoff, paths, cut, request, change, out=out,
                             stop_asked=stop_asked)
    except RebaseInterrupted:
        raise
    except ReconciliationFailed as err:
        handoff_log.append(tables, handoff.handoff_id, Status.RECONCILIATION_FAILED,
                           details=details.ReconciliationFailed(request_id=request.request_id, reason=str(err),
                                                                resumable=err.resumable,
                                                                reconciliation=err.reconciliation))
        raise
    except UserError as err:
        finisher = ("`switchyard redeploy` under the changed definition" if request.redeploy else
                    "`switchyard stream` (or `switchyard rebase`)")
        reason = (f"{err}; the rebase stays paused at its cut: once that is fixed, {finisher} finishes it there"
                  + ("; or `switchyard rebase --abandon` gives it up and the paused stream resumes from its checkpoint"
                     if resumable(tables, handoff, paths) and _committed_backfill(tables, request) is None
                     else ""))
        not_now = isinstance(err, NotNow)
        handoff_log.append(tables, handoff.handoff_id, Status.FAILED, details=details.Failed(
            phase="rebase", request_id=request.request_id, reason=reason, not_now=not_now))
        raise (NotNow if not_now else UserError)(reason) from None
    except Exception as err:  # a query, the cluster or Kafka: the same record, so the failures after a pause count
        said = str(err).strip()
        reason = f"{type(err).__name__}" + (f": {said.splitlines()[0][:400]}" if said else "")
        try:
            handoff_log.append(tables, handoff.handoff_id, Status.FAILED, details=details.Failed(
                phase="rebase", request_id=request.request_id,
                reason=f"{reason}; the rebase stays paused at its cut: the next `stream` (or `rebase`) finishes it"))
        except Exception:  # noqa: BLE001 - the log out of reach too: the exit code still says it
            pass
        raise


def refuse_other_definition(pipeline: Pipeline, tables: Tables, handoff: Handoff, request: RebaseRequest) -> None:
    """A redeploy's request is run only under the definition it moves the pipeline to: under another one it is
    refused before its pause (REBASE_REFUSED: the stream streams on), and after it left open for `switchyard
    redeploy` under that definition to finish at its cut."""
    wanted = request.redeploy.version if request.redeploy else None
    if wanted is None or wanted == definition.version(pipeline):
        return
    reason = (f"the redeploy of {pipeline.name} (request {request.request_id}) moves it to definition version "
              f"{wanted}, and this process runs version {definition.version(pipeline)}: `switchyard redeploy` under "
              "that definition finishes it")
    if request.paused is None:
        handoff_log.append(tables, handoff.handoff_id, Status.REBASE_REFUSED,
                           details=details.RebaseRefused(request_id=request.request_id, reason=reason))
        raise RebaseRefused(reason)
    raise UserError(f"{reason} at its cut, or `switchyard rebase --abandon` gives it up")


# ---------------------------------------------------------------- requests (the other side: `rebase`, `backfill`)

def rebase_pipeline(pipeline: Pipeline, tables: Tables, bootstrap: str, reason: str, requested_by: str,
                    session, days: tuple[str | None, str | None] = (None, None), timeout_s: float = 3600.0,
                    no_rebase: bool = False, accept_differences: bool = False, finish_stream=None,
                    out=logger.info) -> Handoff:
    """A backfill or rebase once a handoff exists. A live stream is asked to rebase and waited for until the new
    handoff is SWITCHED; with no stream live, this process rebases itself, holding the pipeline's lease
    (`session` builds the SparkSession only then). A stream killed without a stop (or stopped mid-batch) is first
    streamed until caught up by `finish_stream(spark)` (jobs/stream: `stream_until_caught_up`), which replays its
    planned batch and drains `state` (a stream that cannot run is reported, and the rebase goes on); without
    `finish_stream`, the rebase is refused in one line naming that command."""
    if lease.stream_running(tables):
        if no_rebase:
            owner = lease.owner(tables)
            raise UserError(f"pipeline {pipeline.name} has a live stream "
                            f"({owner.describe(datetime.now(timezone.utc)) if owner else 'switchyard stream'}): "
                            "--no-rebase refuses to backfill under it; stop it, or drop --no-rebase to rebase it")
        request_id = request_rebase(PipelineView.read(tables), requested_by, reason, days,
                                    accept_differences=accept_differences).request_id
        out(f"{reason} {pipeline.name}: the stream is live; asked it to rebase at a cut (request {request_id})")
        new = wait_for_rebase(tables, request_id, timeout_s, out)
        out(f"{reason} {pipeline.name}: rebased at the cut; handoff {new.handoff_id} SWITCHED")
        return new
    unsettled = unsettled_stream(PipelineView.read(tables))
    if unsettled is not None:
        killed, how = unsettled
        if finish_stream is None:
            raise UserError(f"the stream of handoff {killed} {how}, maybe before `state` applied every update it "
                            f"sent: run `switchyard stream --pipeline {pipeline.name} --until-caught-up` first, then "
                            f"{reason} again")
        warnings_to(out)(f"{reason} {pipeline.name}: the stream of handoff {killed} {how}; streaming until caught up "
                         "first, so that `state` holds every update it sent")
        try:
            finish_stream(session())
        except Exception as err:  # noqa: BLE001 - a stream that cannot run (Kafka's retention passed it) is what a
            # rebase is the way out of: it goes on, and its reconciliation names any key the stream left unsettled
            warnings_to(out)(f"{reason} {pipeline.name}: the stream did not catch up "
                             f"({str(err).splitlines()[0][:300]}); rebasing from where it stands")
    with lease.hold(tables, requested_by):
        spark = session()
        request_id = request_rebase(PipelineView.read(tables), requested_by, reason, days,
                                    accept_differences=accept_differences).request_id
        while True:  # an older request a crash or a failure left open goes first, with this run's acceptance
            view = PipelineView.read(tables)
            request = view.ledger.open_rebase.accepting(accept_differences)
            try:
                new = run_rebase(spark, pipeline, tables, bootstrap, view.current_handoff, request, out)
            except RebaseRefused:
                if request.request_id == request_id:
                    raise
                continue  # refused and answered: this run's request next
            if request.request_id == request_id:
                break
    out(f"{reason} {pipeline.name}: rebased at the cut (request {request_id}); handoff {new.handoff_id} committed: "
        "`switchyard stream` streams from it")
    return new
