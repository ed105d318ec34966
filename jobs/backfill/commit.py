"""The commit: every tile merged into keyed state and windows, the stream's seed written while the JVM is warm,
and BACKFILL_COMMITTED appended with the boundary and the accounting (isBacklog ends here)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from switchyard.jobs.aggregation import (SORT, TILE_START, backlog_watermark, newest_event_time, state_from_partials,
                                         window_end, window_partials_from_tiles)
from switchyard.jobs.backfill import backlog
from switchyard.jobs.backfill.accounting import archive_accounting
from switchyard.jobs.backfill.read import archived_boundary, bad_file, file_problem, resolve_range, skipped_gaps
from switchyard.jobs.backfill.tail import kafka_tail_tiles, kafka_tail_to_latest
from switchyard.jobs.backfill.tiles import BackfillResult, KeptTiles, backfill_tiles, failure_logged, pending_tiles_run
from switchyard.jobs.log import warnings_to
from switchyard.jobs.rebase.reconciliation import merged_over_all_keys, over_all_keys, reconcile
from switchyard.jobs.seed import UPDATE_VERSION, prepare_stream
from switchyard.jobs.sinks import appended_tables
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import handoff_log, kept_versions
from switchyard.state_handoff.control.details import BackfillCommitted
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.step_times import StepTimes
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import delta_upkeep, fencing, storage
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


@dataclass
class AtCut:
    """A backfill under a stream's history (jobs/rebase/run.py): the backlog ends at a cut, not at the archive's end.

    The Kafka range past the archive's cut arrives as keyed partials; the windows, late records and dead
    letters stay as the stream made them (a final window is never re-emitted, a late record never joins a
    window); the recomputed keyed state is compared with the streamed state at the same cut before it
    replaces it."""

    cut: dict[int, int]                 # per partition, the first offset the next handoff streams
    kafka_partials: DataFrame           # keyed partials of the well-formed records in [archive cut, cut)
    streamed: DataFrame                 # the streamed keyed state at the cut
    watermark: datetime | None          # the stream's watermark at the cut (or what before_replace returns)
    details: dict = field(default_factory=dict)
    reconciliation: dict = field(default_factory=dict)
    # called with the reconciliation once it is known, before the recomputed state replaces anything: it may
    # refuse (raise), and what it returns becomes the watermark
    before_replace: Callable[[dict], datetime | None] | None = None
    # the pipeline the reconciliation compares by (a redeploy's: only the aggregations both definitions declare)
    compared: Pipeline | None = None
    # a redeploy that changes the windows: the tiles of the Kafka range past the archive's cut. The windows are then
    # made again from every tile and these, split at the recomputed state's backlog watermark, and `late` is emptied:
    # up to the cut everything is backlog, none of it late (the events path keeps only its dead letters)
    windows_past: DataFrame | None = None
    # a redeploy to another key: `streamed` is merged over all its keys, and so is the recomputed state before the two
    # are compared
    over_all_keys: bool = False
    # why the two states are not compared at all (a redeploy whose records parse otherwise: the states hold other
    # records); the accounting over the remade dead letters is the check then
    not_compared: str | None = None


def _write_windows(pipeline: Pipeline, tables: Tables, tiles: DataFrame, watermark: datetime,
                   redo: datetime | None = None) -> None:
    """The windows of all tiles, split at the backlog watermark into `windows` (closed) and `window_state` (open).

    Given `redo` (jobs/backfill/backlog.py's windows_to_redo): only the windows starting there or later are made
    from their tiles; the earlier ones are the earlier commit's (none of them closed at or past `redo`), the open
    ones among them split again at the new watermark, the newly closed appended to `windows`.

    Else every window: a tile lies in one window, so the tiles are split before they are aggregated: two
    aggregations over disjoint tiles, the open one small, instead of one aggregation kept on disk and read twice.
    Both run here, in turn: on a second thread beside the state's write and the seed they helped a commit alone,
    but slowed each other once a Kafka tail was folded in."""
    if redo is not None:
        made = window_partials_from_tiles(pipeline, tiles.where(F.col("event_date") >= F.lit(redo.date())).where(
            F.col(TILE_START) >= F.lit(redo)))
        spark = tiles.sparkSession
        open_before = spark.read.format("delta").load(tables.window_state).where(F.col("window_start") < F.lit(redo))
        windows = open_before.select(*made.columns).unionByName(made).persist(StorageLevel.DISK_ONLY)
        closed = F.col("window_end") <= F.lit(watermark)
        parts = [(windows.where(closed), tables.windows, "append"), (windows.where(~closed), tables.window_state,
                                                                     "overwrite")]
    elif pipeline.windows.per_record == 1:
        closed = window_end(pipeline, F.col(TILE_START)) <= F.lit(watermark)
        parts = [(window_partials_from_tiles(pipeline, tiles.where(part)), path, "overwrite")
                 for part, path in ((closed, tables.windows), (~closed, tables.window_state))]
    else:  # a pane lies in several windows, closed and open: the windows are made first, then split
        windows = window_partials_from_tiles(pipeline, tiles).persist(StorageLevel.DISK_ONLY)
        closed = F.col("window_end") <= F.lit(watermark)
        parts = [(windows.where(closed), tables.windows, "overwrite"),
                 (windows.where(~closed), tables.window_state, "overwrite")]
    for partials, path, mode in parts:
        writer = partials.write.format("delta").mode(mode)
        if mode == "overwrite":
            writer = writer.option("overwriteSchema", "true")
        writer.options(**fencing.spark_options(path)).save(path)
    if redo is not None or pipeline.windows.per_record > 1:
        windows.unpersist()


def _no_late(spark: SparkSession, pipeline: Pipeline, tables: Tables) -> None:
    """`late` emptied, in one commit: its rows are in the windows made again at a redeploy's cut. Its schema is
    `pipeline`'s (a changed definition's key fields or event time name other columns)."""
    schema, _ = appended_tables(pipeline, tables)[tables.late]
    (spark.createDataFrame([], from_arrow_schema(schema)).write.format("delta").mode("overwrite")
     .option("overwriteSchema", "true").options(**fencing.spark_options(tables.late)).save(tables.late))


def commit_state(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiles_run: BackfillResult | None = None,
                 out=logger.info, at_cut: AtCut | None = None, kafka_tail_from: str | None = None,
                 kept: KeptTiles | None = None) -> BackfillResult:
    """Merge every tile into keyed state and windows and append BACKFILL_COMMITTED (isBacklog ends here).
    `kafka_tail_from` (a bootstrap): fold the archived topic's records up to its end into the backlog too.
    `kept`: the tiles this process's tiles run kept (read instead of the table when they are all of it; released)."""
    started = time.monotonic()
    times = StepTimes(started)  # where the commit's seconds go: BACKFILL_COMMITTED's commit_s
    first, last, archive, _ = resolve_range(tables, None, None)
    files = archive.files
    # the files this process's tiles run read a moment ago are not opened again; a tiles run loaded from its
    # record (a separate step, maybe hours ago) checks every file again
    just_read = set(tiles_run.files) if tiles_run is not None else set()
    problems = {f.path: file_problem(archive, f) for f in files if f.path not in just_read}
    readable = [f for f in files if problems.get(f.path) is None]
    run = tiles_run or pending_tiles_run(tables) or BackfillResult(handoff_log.new_handoff_id(), first, last)
    tail = tail_parsed = tail_tiles = None
    with failure_logged(spark, tables, run.handoff_id):
        # a committed file gone bad since the tiles run (or a rebase's tiles made long ago) is refused, never
        # skipped: only files that run skipped under --skip-bad-files leave the recorded gap the handoff refuses
        bad = next((f for f in files if problems.get(f.path) and f.path not in run.skipped_files), None)
        if bad is not None:
            raise bad_file(archive, bad, problems[bad.path])
        tiles_version = backlog.table_version(tables.tiles)  # the tiles this commit merges, read at that version
        by_key = kept is not None and kept.covers(tiles_version, backlog.tile_days(tables.tiles, tiles_version))
        if by_key:  # this process's tiles run wrote every tile the table holds: read from local disk, by key
            tiles = archive_tiles = kept.frame
        else:
            reader = spark.read.format("delta")
            if tiles_version is not None:
                reader = reader.option("versionAsOf", tiles_version)
            tiles = archive_tiles = reader.load(tables.tiles)
        if kafka_tail_from is not None and at_cut is None:
            tail = kafka_tail_to_latest(tables, kafka_tail_from)
            out(f"[5/5] reading the Kafka tail of {tail.topic} in batch ({tail.records:,} records: "
                + ", ".join(f"p{p}:{tail.start.get(p, 0)}..{o}" for p, o in sorted(tail.end.items())) + ")")
            tail_parsed, tail_tiles, tail_accounting = kafka_tail_tiles(spark, pipeline, tables, tail)
            run.kafka_tail = {**tail.as_details(), "records": tail.records, "accounting": tail_accounting}
            tiles = tiles.unionByName(tail_tiles)
            times.end("kafka_tail")
        out("[5/5] merging the tiles into keyed state" + (" at the cut" if at_cut else " and windows"))
        # kept (one row per key, on local disk) for what follows the write: the watermark, the seed, the keys
        merged, earlier = backlog.merged_tiles(spark, pipeline, tables, archive_tiles, out, also=tail_tiles,
                                               by_key=by_key)
        merge_record = None
        columns = [*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True)]
        if at_cut is not None:  # the tiles' merge alone is kept apart, for the next rebase's commit to start from
            if earlier is not None and earlier.in_backlog_as_is:
                out(f"  the tiles' merge kept from the earlier commit (backlog version {earlier.version})")
                backlog_version = earlier.version
            else:
                (merged.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
                 .options(**fencing.spark_options(tables.backlog)).save(tables.backlog))
                backlog_version = backlog.table_version(tables.backlog)
            merge_record = backlog.record(pipeline, "backlog", backlog_version, tiles_version)
            merged = state_from_partials(pipeline, spark.read.format("delta").option("versionAsOf", backlog_version)
                                         .load(tables.backlog).select(*columns)
                                         .unionByName(at_cut.kafka_partials.select(*columns)))
            times.end("tiles_merge")
        state = merged.persist(StorageLevel.DISK_ONLY)
        if at_cut is not None:
            compared, recomputed = at_cut.compared or pipeline, state
            if at_cut.over_all_keys:
                compared, recomputed = over_all_keys(compared), merged_over_all_keys(compared, state)
            at_cut.reconciliation = ({"keys_different": 0, "keys_recomputed": state.count(), "examples": [],
                                      "not_compared": at_cut.not_compared} if at_cut.not_compared
                                     else reconcile(compared, recomputed, at_cut.streamed))
            times.end("reconciliation")
            if at_cut.before_replace is not None:  # a rebase's: the events path caught up to the cut
                at_cut.watermark = at_cut.before_replace(at_cut.reconciliation)
                times.end("catch_up")
        (state.withColumn(UPDATE_VERSION, F.lit(0).cast("long"))
         .write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .options(**fencing.spark_options(tables.state)).save(tables.state))
        state_version = backlog.table_version(tables.state)
        times.end("state")
        anew = at_cut is not None and at_cut.windows_past is not None  # the windows made again at the cut
        watermark = (at_cut.watermark if at_cut is not None and not anew
                     else backlog_watermark(pipeline, newest_event_time(state)))
        times.end("watermark")
        prepare_stream(spark, pipeline, tables, run.handoff_id, state_version, state)
        times.end("seed_and_stream_tables")
        windows_record = None
        if pipeline.windows is not None and (at_cut is None or anew):
            redo = backlog.windows_to_redo(pipeline, tables, earlier) if tail is None and at_cut is None else None
            if redo is not None:
                out(f"  making the windows from {redo:%Y-%m-%d %H:%M} on again, the earlier ones kept")
            elif anew:
                out("  making every window again at the cut, under the changed windows")
            _write_windows(pipeline, tables, tiles.unionByName(at_cut.windows_past) if anew else tiles, watermark,
                           redo)
            if anew:
                _no_late(spark, pipeline, tables)
            elif tail is None:  # windows of the tiles alone: the next commit may keep them
                windows_record = backlog.window_versions(tables)
        times.end("windows")
        if at_cut is None and tail is None:  # the state is the tiles' merge and nothing else
            merge_record = backlog.record(pipeline, "state", state_version, tiles_version, windows_record)
        boundary = ({p: o - 1 for p, o in at_cut.cut.items()} if at_cut is not None
                    else archived_boundary(spark, tables, archive, readable))
        if tail is not None:
            boundary.update({p: o - 1 for p, o in tail.end.items() if o > tail.start.get(p, 0)})
            tail_parsed.unpersist()
            tail_tiles.unpersist()
        # The tiles run's own count when it covered exactly the archive's readable files (a backfill of every day
        # since nothing changed): the archive read a third time would give the same figures.
        whole = ({p: dict(a) for p, a in run.accounting.items()} if run.files and run.accounting
                 and run.files == sorted(f.path for f in readable) and at_cut is None
                 else archive_accounting(spark, pipeline, tables, archive, readable, first, last))
        times.end("boundary_and_accounting")
        missing = {p: a["read"] - a["well_formed"] - a["dead_lettered"] for p, a in whole.items()
                   if a["read"] != a["well_formed"] + a["dead_lettered"]}
        keys = state.count()
        state.unpersist()
        if kept is not None:
            kept.release()
        gaps = skipped_gaps(archive, [f.path for f in files if f not in readable], boundary)
        times.end("keys_and_gaps")
    result = replace(run, keys=keys, state_version=state_version, backlog_watermark=watermark, boundary=boundary,
                     seconds=run.seconds + time.monotonic() - started)
    faults.reach("backfill.after_state")
    handoff_log.append(tables, run.handoff_id, Status.BACKFILL_COMMITTED,
                       state_version=state_version, backlog_watermark=watermark,
                       details=BackfillCommitted(
                           from_=str(run.first_day), to=str(run.last_day), boundary=boundary,
                           records_read=run.records_read, well_formed=run.well_formed,
                           dead_lettered=run.dead_lettered, keys=keys, accounting=run.accounting,
                           archive_accounting=whole,
                           complete=not missing and not any(g["below_boundary"] for g in gaps),
                           records_not_backfilled=missing,
                           unreadable_files=[f.path for f in files if f not in readable],
                           skipped_files=run.skipped_files, gaps=gaps,
                           tiled_files=[] if missing else sorted(
                               storage.relative(f.path, tables.archive) for f in readable),
                           duration_s=round(result.seconds, 3), tiles_s=run.tiles_s, commit_s=times.parts,
                           backlog=merge_record, **definition.as_details(pipeline),
                           kafka_tail=run.kafka_tail if tail is not None else None,
                           at_cut={**at_cut.details, "cut": at_cut.cut, "reconciliation": at_cut.reconciliation}
                           if at_cut else None))
    # what this commit and earlier backfills replaced, over an hour ago; of `tiles`, the previous definition's kept
    committed = PipelineView.read(tables)  # the log with this commit's entry
    delta_upkeep.vacuum(tables.tiles, keep_versions=kept_versions.kept_tiles_versions(committed))
    for path in (tables.windows, tables.window_state, tables.dead_letter, tables.backlog):
        delta_upkeep.vacuum(path)
    delta_upkeep.vacuum(tables.state, keep_versions=kept_versions.kept_state_versions(committed))  # and the seeds' state
    warn = warnings_to(out)
    if missing:
        warn(f"  note: archived records not yet in the tiles, per partition: {missing}; "
            "backfill the remaining days before the handoff (`switchyard backfill` without --from and --to covers "
            "every archived day)")
    for g in (g for g in gaps if g["below_boundary"]):
        held = "offsets not recorded" if g["from"] is None else f"p{g['partition']}:{g['from']}..{g['to']}"
        warn(f"  note: skipped file {g['file']} holds {held} below the boundary; the handoff will refuse "
            "until the file is restored or rewritten and the backfill rerun")
    return result


def run_backfill(spark: SparkSession, pipeline: Pipeline, tables: Tables, first_day: str | None = None,
                 last_day: str | None = None, skip_bad_files: bool = False, strategy: str = SORT,
                 out=logger.info, kafka_tail_from: str | None = None) -> BackfillResult:
    """`switchyard backfill`: the day tiles of a range, then the state over all tiles (and, given
    `kafka_tail_from`, the archived topic's records after the archive up to the topic's end)."""
    kept = KeptTiles()
    tiles_run = backfill_tiles(spark, pipeline, tables, first_day, last_day, skip_bad_files, strategy, out, kept)
    try:
        if tiles_run.handoff_id is None:
            return tiles_run
        return commit_state(spark, pipeline, tables, tiles_run, out, kafka_tail_from=kafka_tail_from, kept=kept)
    finally:
        kept.release()
