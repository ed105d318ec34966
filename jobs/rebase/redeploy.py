"""Redeploy (beyond Flink: FLIP-605, a draft, proposes it): a pipeline whose definition changed moves to the changed
definition at a cut, exactly once, its history recomputed sort-based in batch.

`switchyard redeploy` runs under the changed definition (the team's new code). It
1. refuses in one line, before any JVM, what a cut cannot move (state_handoff/language/definition.py: refuse_redeploy), an
   unchanged definition, and a rebase of the recorded definition still open;
2. tiles every archived day under the changed definition, sort-based, beside the live stream (jobs/rebase/beside.py);
3. stops the live stream, when one runs (STOP_REQUESTED, answered by STOPPED once `state` holds every update it
   sent): until the cut the recorded definition serves;
4. rebases at a cut under the changed definition (jobs/rebase/run.py, with the request's `redeploy`): the tiles made
   beside take the recorded definition's place (the days archived since are tiled then), the Kafka range past the
   archive is read in batch, and both are merged into the state at the cut; the reconciliation compares what both
   definitions declare alike (the same name, the same declaration); the events path goes on as the stream made it
   when only keyed aggregations changed (they shape none of it), and changed windows are made again from the tiles
   and the Kafka range past the archive, none of it late (jobs/backfill/commit.py: AtCut.windows_past); a changed
   key is compared over all keys, and the updates topic moved to it (jobs/rebase/rekey.py); records parsed otherwise (a
   changed input, fields or event time) have their dead letters made again over all history as well, the archive's
   beside the stream (jobs/rebase/reparse.py), and nothing is compared;
   BACKFILL_COMMITTED and HANDOFF_COMMITTED record the changed definition.
Serving switches in one Delta commit: every version of `state` before the handoff's `state_version` holds the
recorded definition's rows, every one from it on the changed definition's; the updates topic carries the recorded
definition's updates up to the cut and the changed one's after it. `switchyard stream` (or `serve`) under the changed
definition then streams from the cut.
A redeploy that fails or dies stays open at its cut: `switchyard redeploy` again finishes it there, and a stream of
the recorded definition refuses to run past it; `switchyard rebase --abandon` gives it up while the stopped stream
can still resume, with the tiles put back as they were before it (jobs/rebase/requests.py).

`switchyard rollback` is a redeploy back to the definition the newest redeploy replaced, run under it: that
definition's tiles were kept (vacuum keeps their `tiles` version: state_handoff/control/kept_versions.py), so the cut
restores them in one metadata commit instead of tiling the archive beside the stream. `switchyard redeploy
--drop-previous` lets them go; a rollback then is refused, naming `switchyard redeploy` under that definition.
"""

from __future__ import annotations

import logging

from switchyard.jobs.backfill.backlog import table_version
from switchyard.jobs.rebase.beside import drop_beside, tile_beside
from switchyard.jobs.rebase.requests import unsettled_stream
from switchyard.jobs.rebase.run import run_rebase
from switchyard.jobs.stop import stop_stream
from switchyard.state_handoff.control import kept_versions, lease, requests
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.requests import (REDEPLOY, PreviousDropped, RebaseRequest, RedeployPlan,
                                                       request_rebase, request_start)
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)
REQUESTED_BY = REDEPLOY


def check_redeploy(pipeline: Pipeline, tables: Tables) -> RebaseRequest | None:
    """Before any JVM: the open redeploy request to finish (None: a new one is to be asked for); UserError, in one
    line, when there is nothing to redeploy or a cut cannot move the pipeline to `pipeline`."""
    view = PipelineView.read(tables)
    found = view.recorded_definition
    if view.handoff is None or found is None:
        raise UserError(f"pipeline {pipeline.name} has no handoff that recorded its definition: there is nothing to "
                        "redeploy (archive, backfill and hand off under this definition)")
    request = view.ledger.open_rebase
    if request is not None:
        if (request.redeploy.version if request.redeploy else None) != definition.version(pipeline):
            raise UserError(f"pipeline {pipeline.name} has an open {request.reason or 'rebase'} (request "
                            f"{request.request_id}): finish it under the definition it was asked under, or give it "
                            "up with `switchyard rebase --abandon`, then redeploy")
        return request
    _, record = found
    if record["version"] == definition.version(pipeline):
        raise UserError(f"pipeline {pipeline.name}'s tables were made with this definition (version "
                        f"{record['version']}): there is nothing to redeploy")
    why = definition.refuse_redeploy(pipeline, record)
    if why is not None:
        raise UserError(f"pipeline {pipeline.name} cannot be redeployed at a cut: {why}; declare the changed "
                        "definition as a pipeline of another name and archive, backfill, hand off and stream that")
    return None


def check_rollback(pipeline: Pipeline, tables: Tables) -> dict:
    """Before any JVM: what a rollback to `pipeline` restores, as a redeploy's tiles made beside (the `tiles` version
    kept with it: the ledger's previous_definition); UserError, in one line, when `pipeline` is not the definition
    the newest redeploy replaced, or that one's tiles were dropped."""
    previous = PipelineView.read(tables).ledger.previous_definition
    if previous is None:
        raise UserError(f"pipeline {pipeline.name} has no redeploy handed off: there is no earlier definition to "
                        "roll back to")
    then, now = previous.record["version"], definition.version(pipeline)
    if then != now:
        raise UserError(f"`switchyard rollback` moves pipeline {pipeline.name} back to definition version {then}, the "
                        f"one its redeploy (request {previous.request_id}) replaced; this process runs version "
                        f"{now}: run it under that definition")
    if previous.dropped or previous.tiles_version is None:
        raise UserError(f"the tiles of pipeline {pipeline.name}'s definition version {then} were dropped (`switchyard "
                        "redeploy --drop-previous`): `switchyard redeploy` under it moves back with every archived "
                        "day tiled again")
    return {"version": now, "restore": int(previous.tiles_version), "files": previous.files}


def drop_previous(tables: Tables, out=logger.info) -> None:
    """`switchyard redeploy --drop-previous`: the tiles kept for a rollback are let go (PREVIOUS_DROPPED), their files
    deleted by this vacuum once replaced over the vacuum's retention ago, else by a later one."""
    view = PipelineView.read(tables)
    previous = view.ledger.previous_definition
    if previous is None or previous.dropped:
        raise UserError(f"pipeline {tables.pipeline} keeps no earlier definition's tiles: nothing to drop")
    requests.ask(tables, PreviousDropped(handoff_id=view.handoff.handoff_id, requested_by="switchyard redeploy "
                                         "--drop-previous", redeploy_request=previous.request_id,
                                         tiles_version=previous.tiles_version))
    delta_upkeep.vacuum(tables.tiles, keep_versions=kept_versions.kept_tiles_versions(PipelineView.read(tables)))
    out(f"redeploy {tables.pipeline}: definition version {previous.record['version']} dropped: `switchyard "
        "rollback` no longer restores it; its tiles' files go with the vacuums of `tiles`")


def redeploy_pipeline(pipeline: Pipeline, tables: Tables, bootstrap: str, session, timeout_s: float = 300.0,
                      accept_differences: bool = False, rollback: bool = False, out=logger.info) -> Handoff:
    """Steps 1-4 of the module docstring; returns the handoff at the cut (`session` builds the SparkSession, after
    step 1's refusals). `rollback`: `pipeline` is the definition the newest redeploy replaced, whose tiles were kept:
    they are restored at the cut, and nothing is tiled beside."""
    restored = check_rollback(pipeline, tables) if rollback else None
    finishing = check_redeploy(pipeline, tables)
    spark = session()
    # a new redeploy: the whole history tiled while the recorded definition still serves (a rollback's are kept)
    beside = restored
    if not restored and finishing is None:
        _, record = PipelineView.read(tables).recorded_definition
        beside = tile_beside(spark, pipeline, tables, definition.diff(record, pipeline), out)
    stopped = lease.stream_running(tables)
    if stopped:
        out(f"redeploy {pipeline.name}: stopping the live stream; the recorded definition serves up to the cut")
        if stop_stream(tables, timeout_s=timeout_s, out=out, requested_by=REQUESTED_BY) is None:
            raise UserError(f"the stream of {pipeline.name} ended without STOPPED: see `switchyard status`, then "
                            "redeploy again")
    unsettled = unsettled_stream(PipelineView.read(tables))
    if unsettled is not None:
        raise UserError(f"the stream of handoff {unsettled[0]} {unsettled[1]}, maybe before `state` applied every "
                        f"update it sent: run `switchyard stream --pipeline {pipeline.name} --until-caught-up` under "
                        "the recorded definition first, then redeploy")
    with lease.hold(tables, REQUESTED_BY):
        request = check_redeploy(pipeline, tables)  # again, holding the pipeline
        view = PipelineView.read(tables)
        if request is None:
            _, record = view.recorded_definition
            plan = RedeployPlan(definition.version(pipeline), record, table_version(tables.tiles),
                                table_version(tables.dead_letter), beside or None)
            request_rebase(view, REQUESTED_BY, "rollback" if rollback else "redeploy", redeploy=plan,
                           accept_differences=accept_differences)
            view = PipelineView.read(tables)
            request = view.ledger.open_rebase
            out(f"redeploy {pipeline.name}: definition version {record['version']} -> "
                f"{definition.version(pipeline)} ({', '.join(definition.changes(record, pipeline))}), request "
                f"{request.request_id}")
        else:
            out(f"redeploy {pipeline.name}: finishing request {request.request_id} at its cut")
        new = run_rebase(spark, pipeline, tables, bootstrap, view.current_handoff,
                         request.accepting(accept_differences), out)
    drop_beside(tables)
    out(f"redeploy {pipeline.name}: definition version {definition.version(pipeline)} handed off at the cut as "
        f"{new.handoff_id}: `switchyard stream` streams it from there")
    if stopped:  # the stop request the redeploy made is lifted: `switchyard serve`, run under this definition, streams
        try:
            request_start(PipelineView.read(tables), REQUESTED_BY)
            out(f"redeploy {pipeline.name}: START_REQUESTED: `switchyard serve` under the changed definition streams "
                "it")
        except UserError:  # a stream of the changed definition already runs: nothing to ask for
            pass
    return new
