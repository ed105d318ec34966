"""The commit: every tile merged into keyed state (and windows), the stream's seed written while the JVM is warm, and
BACKFILL_COMMITTED appended with the boundary and the accounting (isBacklog ends here). Two modes over the same steps
(tiled.py reads what they need once, writes.py writes the outputs, committed.py counts and logs):

- commit_backfill: the backlog ends at the archive's end (and, given a Kafka tail, at the topic's end);
- a rebase's at its cut, in two calls around the rebase's own steps (jobs/rebase/at_cut.py): merge_at_cut returns
  the recomputed state, which the rebase reconciles with the streamed one and catches the events path up against;
  commit_at_cut then takes what those steps returned and replaces the streamed state."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession

from switchyard.jobs.aggregation import SORT, backlog_watermark, newest_event_time, state_from_partials
from switchyard.jobs.backfill import backlog
from switchyard.jobs.backfill.committed import Committed, count_backlog, record_commit
from switchyard.jobs.backfill.read import archived_boundary
from switchyard.jobs.backfill.tail import TailTiles, read_tail
from switchyard.jobs.backfill.tiled import TiledBacklog, read_backlog
from switchyard.jobs.backfill.tiles import BackfillResult, KeptTiles, backfill_tiles, failure_logged
from switchyard.jobs.backfill.writes import empty_late, write_state, write_windows
from switchyard.jobs.seed import prepare_stream
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def commit_backfill(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiles_run: BackfillResult | None = None,
                    out=logger.info, kafka_tail_from: str | None = None,
                    kept: KeptTiles | None = None) -> BackfillResult:
    """Merge every tile into keyed state and windows and append BACKFILL_COMMITTED (isBacklog ends here).
    `tiles_run`: the run whose tiles are committed (None: the one a separate step left pending, as Dagster's state
    asset commits its tiles asset's). `kafka_tail_from` (a bootstrap): fold the archived topic's records up to its end
    into the backlog too. `kept`: the tiles this process's tiles run kept (read instead of the table when they are all
    of it; released)."""
    tiled = read_backlog(spark, pipeline, tables, tiles_run, kept)
    with failure_logged(spark, tables, tiled.run.handoff_id):
        tail = read_tail(spark, pipeline, tables, kafka_tail_from, out) if kafka_tail_from is not None else None
        tiles = tiled.tiles if tail is None else tiled.tiles.unionByName(tail.tiles)
        if tail is not None:
            tiled.times.end("kafka_tail")
        out("[5/5] merging the tiles into keyed state and windows")
        # kept (one row per key, on local disk) for what follows the write: the watermark, the seed, the keys
        state = backlog.merged_tiles(spark, pipeline, tables, tiled.tiles, tiled.earlier, out,
                                     also=tail.tiles if tail is not None else None,
                                     by_key=tiled.by_key).persist(StorageLevel.DISK_ONLY)
        state_version = write_state(tables, state)
        tiled.times.end("state")
        watermark = backlog_watermark(pipeline, newest_event_time(state))
        tiled.times.end("watermark")
        prepare_stream(spark, pipeline, tables, tiled.run.handoff_id, state_version, state)
        tiled.times.end("seed_and_stream_tables")
        windows = _backfill_windows(pipeline, tables, tiled, tiles, watermark, tail, out)
        tiled.times.end("windows")
        # the state is the tiles' merge and nothing else, unless a tail was folded in
        merge = (backlog.record(pipeline, "state", state_version, tiled.tiles_version, windows) if tail is None
                 else None)
        boundary = archived_boundary(spark, tables, tiled.archive, tiled.readable)
        if tail is not None:
            boundary.update(tail.boundary)
            tail.unpersist()
        counted = count_backlog(spark, pipeline, tables, tiled, state, boundary, runs_count=True)
        if kept is not None:
            kept.release()
    return record_commit(tables, pipeline, tiled, Committed(
        state_version, watermark, boundary, merge, counted,
        kafka_tail=tail.as_details() if tail is not None else None), out)


def _backfill_windows(pipeline: Pipeline, tables: Tables, tiled: TiledBacklog, tiles: DataFrame, watermark: datetime,
                      tail: TailTiles | None, out) -> dict | None:
    """A windowed pipeline's windows from `tiles`, those before the newly tiled days kept when they can be; returns
    the window tables' versions when made from the tiles alone (no tail): the next commit may keep them."""
    if pipeline.windows is None:
        return None
    redo = backlog.windows_to_redo(pipeline, tables, tiled.earlier[0]) if tail is None else None
    if redo is not None:
        out(f"  making the windows from {redo:%Y-%m-%d %H:%M} on again, the earlier ones kept")
    write_windows(pipeline, tables, tiles, watermark, redo)
    return backlog.window_versions(tables) if tail is None else None


@dataclass(frozen=True)
class MergedAtCut:
    """The keyed state recomputed at a cut (kept on local disk until the commit counts its keys), and the record of
    the tiles' merge it was made from, kept apart in `backlog` for the next rebase's commit to start from."""

    state: DataFrame
    merge: dict | None


def merge_at_cut(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiled: TiledBacklog,
                 kafka_partials: DataFrame, out=logger.info) -> MergedAtCut:
    """Every tile merged, the tiles' merge alone written to `backlog` (unless the earlier commit's is this one's
    already), then the keyed partials of the Kafka range [archive cut, cut) merged on top."""
    out("[5/5] merging the tiles into keyed state at the cut")
    merged = backlog.merged_tiles(spark, pipeline, tables, tiled.tiles, tiled.earlier, out, by_key=tiled.by_key)
    earlier = tiled.earlier[0]
    if earlier is not None and earlier.in_backlog_as_is:
        out(f"  the tiles' merge kept from the earlier commit (backlog version {earlier.version})")
        backlog_version = earlier.version
    else:
        (merged.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
         .options(**fencing.spark_options(tables.backlog)).save(tables.backlog))
        backlog_version = backlog.table_version(tables.backlog)
    columns = [*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True)]
    state = state_from_partials(pipeline, spark.read.format("delta").option("versionAsOf", backlog_version)
                                .load(tables.backlog).select(*columns).unionByName(kafka_partials.select(*columns)))
    tiled.times.end("tiles_merge")
    return MergedAtCut(state.persist(StorageLevel.DISK_ONLY),
                       backlog.record(pipeline, "backlog", backlog_version, tiled.tiles_version))


@dataclass(frozen=True)
class AtCut:
    """What a rebase's steps at its cut (jobs/rebase/at_cut.py) give its commit. The windows, late records and dead
    letters stay as the stream made them (a final window is never re-emitted, a late record never joins a window),
    unless `windows_past` is given: a redeploy that changes the windows, whose windows are made again from every
    tile and these tiles of the Kafka range past the archive's cut, split at the recomputed state's backlog watermark,
    and whose `late` is emptied: up to the cut everything is backlog, none of it late."""

    cut: dict[int, int]  # per partition, the first offset the next handoff streams
    watermark: datetime | None  # the stream's watermark at the cut, where the events path's catch-up left it
    reconciliation: dict  # the recomputed state against the streamed one (jobs/rebase/reconciliation.py)
    details: dict  # the request, the pause, the archive's cut, ...: BACKFILL_COMMITTED's at_cut with the two above
    windows_past: DataFrame | None = None

    def as_details(self) -> dict:
        return {**self.details, "cut": self.cut, "reconciliation": self.reconciliation}


def commit_at_cut(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiled: TiledBacklog, merged: MergedAtCut,
                  at_cut: AtCut, out=logger.info) -> BackfillResult:
    """The state merged at the cut replaces the streamed one, the seed is written from it (and the windows made
    again, given `windows_past`), and BACKFILL_COMMITTED records the cut with the reconciliation."""
    with failure_logged(spark, tables, tiled.run.handoff_id):
        remade = at_cut.windows_past is not None
        state_version = write_state(tables, merged.state)
        tiled.times.end("state")
        watermark = backlog_watermark(pipeline, newest_event_time(merged.state)) if remade else at_cut.watermark
        tiled.times.end("watermark")
        prepare_stream(spark, pipeline, tables, tiled.run.handoff_id, state_version, merged.state)
        tiled.times.end("seed_and_stream_tables")
        if remade:
            out("  making every window again at the cut, under the changed windows")
            write_windows(pipeline, tables, tiled.tiles.unionByName(at_cut.windows_past), watermark)
            empty_late(spark, pipeline, tables)
        tiled.times.end("windows")
        boundary = {p: o - 1 for p, o in at_cut.cut.items()}
        counted = count_backlog(spark, pipeline, tables, tiled, merged.state, boundary, runs_count=False)
    return record_commit(tables, pipeline, tiled, Committed(state_version, watermark, boundary, merged.merge, counted,
                                                            at_cut=at_cut.as_details()), out)


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
        return commit_backfill(spark, pipeline, tables, tiles_run, out, kafka_tail_from=kafka_tail_from,
                               kept=kept)
    finally:
        kept.release()
