"""A rebase's backlog phase at its cut (jobs/rebase/run.py's steps 1 and 2, and the state committed at the cut), as
steps that each return a value, run in this order:

1. tile_to_cut: the archive's days the last backfill had not tiled (for a redeploy: the tiles made beside it, or a
   rollback's kept ones, put in place, then the days of the archive files they do not hold; else every day), as a
   tiles run;
2. CutStates: the records up to the cut fetched and parsed once, the tiles of the Kafka range past the archive's
   cut, and the streamed state folded up to the cut;
3. merge_at_cut (jobs/backfill/commit.py): the recomputed keyed state;
4. reconcile_at_cut (jobs/rebase/reconciliation.py): the recomputed against the streamed state, and the refusal of
   any difference nobody accepted, before anything at the cut is replaced;
5. catch_up_to_cut: the events path (or only its dead letters, when the windows are made again) caught up to the
   cut, and a redeploy's dead letters past the archive made again: the watermark at the cut;
6. commit_at_cut (jobs/backfill/commit.py), the one place that takes what 3-5 returned: the recomputed state
   replaces the streamed one, BACKFILL_COMMITTED at the cut.
From the backlog's read before step 3 to step 6 a failure is logged FAILED for the commit's handoff id, as a
backfill's commit logs it; BACKFILL_COMMITTED is appended only once every write of step 6 is done."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from switchyard.jobs.backfill import (AtCut, BackfillResult, backfill_tiles, commit_at_cut, failure_logged,
                                      merge_at_cut, read_backlog)
from switchyard.jobs.rebase.beside import take_over_at_cut
from switchyard.jobs.rebase.cut import CutRecords, TilesAtCut, catch_up_events, streamed_state_at, tiles_of
from switchyard.jobs.rebase.reconciliation import ReconciliationFailed, reconcile_at_cut
from switchyard.jobs.rebase.reparse import remake_past_archive
from switchyard.jobs.rebase.requests import resumable
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import Cut, RebaseRequest
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.archive_files import ArchiveListing, read_listing
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.definition import DefinitionChange
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)
Offsets = dict[int, int]


class RebaseInterrupted(Exception):
    """A stop signal between two steps of a rebase: it stops there, paused at its cut, and the next `stream` (or
    `rebase`) finishes it from the step it reached (each step is idempotent)."""


@dataclass(frozen=True)
class RebaseAtCut:
    """One rebase at its cut: the pipeline it runs under, its tables and Kafka, the paused handoff and its stream's
    folders, the cut, the request, and what the definition changes (nothing, but for a redeploy). `stop_asked`: a
    stop signal came (the rebase stops between its steps)."""

    pipeline: Pipeline
    tables: Tables
    bootstrap: str
    handoff: Handoff
    paths: StreamPaths
    cut: Cut
    request: RebaseRequest
    change: DefinitionChange
    stop_asked: Callable[[], bool] = lambda: False

    def between_steps(self, step: str) -> None:
        if self.stop_asked():
            raise RebaseInterrupted(f"stopped after its {step}, paused at its cut")


def recompute_at_cut(spark: SparkSession, rebase: RebaseAtCut, out=logger.info) -> dict:
    """Steps 1-6 of the module docstring; returns the reconciliation BACKFILL_COMMITTED recorded."""
    pipeline, cut = rebase.pipeline, rebase.cut
    archive = read_listing(rebase.tables.archive)
    archive_end = {int(p): int(o) for p, o in archive.meta["cut"].items()}
    out(f"rebase {pipeline.name}: recomputing keyed state from the archive and Kafka "
        + ", ".join(f"p{p}:{archive_end.get(p, 0)}..{o}" for p, o in sorted(cut.offsets.items())))
    tiles_run = tile_to_cut(spark, rebase, archive, archive_end, out)
    rebase.between_steps("tiles")
    states = CutStates(spark, rebase, archive_end)
    try:
        tiled = read_backlog(spark, pipeline, rebase.tables, tiles_run)
        with failure_logged(spark, rebase.tables, tiled.run.handoff_id):
            merged = merge_at_cut(spark, pipeline, rebase.tables, tiled, states.kafka_partials, out)
            reconciliation = reconcile_at_cut(rebase.change, merged.state, states.streamed)
            tiled.times.end("reconciliation")
            refuse_differences(rebase, reconciliation)
            watermark, remade = catch_up_to_cut(spark, rebase, states.records, archive_end, out)
            tiled.times.end("catch_up")
        rebase.between_steps("catch-up")
        commit_at_cut(spark, pipeline, rebase.tables, tiled, merged, AtCut(
            cut.offsets, watermark, reconciliation, _at_cut_details(rebase, archive_end, remade),
            windows_past=states.past if rebase.change.windows_remade else None), out)
    finally:
        states.unpersist()
    return reconciliation


def tile_to_cut(spark: SparkSession, rebase: RebaseAtCut, archive: ArchiveListing, archive_end: Offsets,
                out=logger.info) -> BackfillResult | None:
    """Step 1: the tiles run the commit at the cut closes (None: no day to tile; the commit takes a pending one, if
    any). A redeploy's tiles, of another shape, replace the whole table: those made beside the live stream (or a
    rollback's, kept), then the days of the archive files they do not hold are tiled; else every archived day is
    tiled now."""
    redeploy = rebase.request.redeploy
    held = None
    if redeploy is not None:
        held = take_over_at_cut(spark, rebase.pipeline, rebase.tables, redeploy, rebase.change, archive_end, out)
    whole = redeploy is not None and held is None
    first, last = (None, None) if whole else days_to_tile(rebase.tables, archive, *rebase.request.days, tiled=held)
    if not (first or whole):
        return None
    if redeploy is not None and not whole:
        out(f"redeploy {rebase.pipeline.name}: tiling {first}..{last}, the days of the archive files its tiles do "
            "not hold")
    tiles_run = backfill_tiles(spark, rebase.pipeline, rebase.tables, first, last, out=out, whole=whole)
    return tiles_run if tiles_run.handoff_id is not None else None


def days_to_tile(tables: Tables, archive: ArchiveListing, first: str | None, last: str | None,
                 tiled: set[str] | None = None) -> tuple[str | None, str | None]:
    """The requested days, widened to every day with archive files the tiles do not hold: those the last committed
    backfill had not tiled (the archive grew since), or, given `tiled`, those not in it (the tiles a redeploy took
    over). The Kafka range of a rebase begins at the archive's cut, so the days below it must hold every archived
    record."""
    if tiled is None:
        committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
        tiled = set(details.of(committed).tiled_files or []) if committed else set()
    days = {f.day for f in archive.files if storage.relative(f.path, tables.archive) not in tiled}
    days |= {d for d in (first, last) if d}
    if not days:
        return None, None
    ordered = sorted(str(d) for d in days)
    return ordered[0], ordered[-1]


class CutStates:
    """Step 2: the records of [the lowest of the steps' starts, C), fetched and parsed once; the tiles of the Kafka
    range past the archive's cut (`past`), whose keyed partials the recomputed state folds in; and the streamed state
    at the cut (None when records parse otherwise: nothing is compared). A rebase under the same definition tiles the
    records both states fold in once; a redeploy's streamed state is of the recorded definition, folded on what the
    two definitions declare alike."""

    def __init__(self, spark: SparkSession, rebase: RebaseAtCut, archive_end: Offsets):
        pipeline, cut, change = rebase.pipeline, rebase.cut, rebase.change
        self.records = CutRecords(spark, pipeline, rebase.tables, rebase.bootstrap, rebase.handoff.topic,
                                  {p: min(archive_end.get(p, 0), cut.keyed.get(p, archive_end.get(p, 0)),
                                          cut.events.get(p, archive_end.get(p, 0))) for p in cut.offsets},
                                  cut.offsets)
        self.shared = None if rebase.request.redeploy else TilesAtCut(pipeline, self.records, archive_end, cut)
        past = self.shared.past if self.shared else tiles_of(pipeline, self.records.parsed(archive_end, cut.offsets))
        self.past: DataFrame = past.persist(StorageLevel.DISK_ONLY) if change.windows_remade else past  # read twice
        self.kafka_partials = self.past.select(*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True))
        self.streamed = None if change.reparsed else streamed_state_at(
            spark, change.compared, rebase.tables, self.records, cut, change.key_changed,
            self.shared.streamed_rest if self.shared else None)

    def unpersist(self) -> None:
        self.past.unpersist()
        if self.shared:
            self.shared.unpersist()
        self.records.unpersist()


def refuse_differences(rebase: RebaseAtCut, reconciliation: dict) -> None:
    """Step 4's refusal: a difference stops the rebase, with nothing at the cut replaced, unless the request
    accepts differences."""
    if reconciliation["keys_different"] and not rebase.request.accept_differences:
        raise ReconciliationFailed(rebase.pipeline.name, reconciliation,
                                   resumable(rebase.tables, rebase.handoff, rebase.paths))


def catch_up_to_cut(spark: SparkSession, rebase: RebaseAtCut, records: CutRecords, archive_end: Offsets,
                    out=logger.info) -> tuple[datetime | None, dict | None]:
    """Step 5: the events path caught up to the cut with the stream's own sink (only its dead letters when the
    windows are made again at the cut); returns its watermark there, the new handoff's, and, when records parse
    otherwise, the range past the archive whose dead letters were made again with its accounting."""
    pipeline, cut, change = rebase.pipeline, rebase.cut, rebase.change
    out(f"rebase {pipeline.name}: catching the " + ("dead letters" if change.windows_remade else "events path")
        + " up to the cut " + ", ".join(f"p{p}:{cut.events[p]}..{o}" for p, o in sorted(cut.offsets.items())))
    watermark = catch_up_events(spark, replace(pipeline, windows=None) if change.windows_remade else pipeline,
                                rebase.tables, rebase.bootstrap, rebase.handoff, rebase.paths, cut, records)
    remade = (remake_past_archive(spark, pipeline, rebase.tables, rebase.bootstrap, rebase.handoff.topic, archive_end,
                                  cut.events) if change.reparsed else None)
    return watermark, remade


def _at_cut_details(rebase: RebaseAtCut, archive_end: Offsets, remade: dict | None) -> dict:
    """What BACKFILL_COMMITTED's at_cut records of the rebase, beside its cut and reconciliation."""
    request = rebase.request
    return {"request_id": request.request_id, "reason": request.reason,
            "previous_handoff": rebase.handoff.handoff_id, "archive_cut": archive_end,
            "pause": rebase.cut.as_details(), "accepted_differences": request.accept_differences,
            **({"dead_letters_remade": remade} if remade is not None else {})}
