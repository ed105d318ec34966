"""A redeploy's tiles made beside the live stream: every archived day tiled under the changed definition into
`redeploy_tiles`, a table no stream, backfill or rebase of the recorded definition reads, while that definition's
stream still serves. At the cut, holding the pipeline, they replace `tiles` in one write (tiles are one row per key and
day, far fewer than the records they fold), and the days archived since are tiled as any rebase tiles them: the
sort-based pass over the whole history runs before the stream stops, not after."""

from __future__ import annotations

import logging
import time
from dataclasses import replace

from deltalake.exceptions import DeltaError
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import SORT, TILE_START, tiles_from_events
from switchyard.jobs.backfill.backlog import table_version
from switchyard.jobs.backfill.read import check_files, read_archive, resolve_range
from switchyard.jobs.rebase import reparse
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import RedeployPlan
from switchyard.state_handoff.io import delta_upkeep, fencing, storage
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.aggregates import WINDOW_PREFIX, partial_columns, partial_names
from switchyard.state_handoff.language.definition import DefinitionChange
from switchyard.state_handoff.language.parsing import cached_for_two_passes, parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)
TABLE = "redeploy_tiles"


def tile_beside(spark: SparkSession, pipeline: Pipeline, tables: Tables, change: DefinitionChange,
                out=logger.info) -> dict:
    """Every archived day's tiles under `pipeline` into `redeploy_tiles`, replacing what it held; what a redeploy's
    request records of them: the definition, the table's version and the archive files they fold. When `pipeline`
    only drops or renames aggregations of the recorded definition, or changes windows but not their panes or
    aggregations, the recorded tiles' columns are kept or renamed, or the tiles serve as they are, and the archive is
    not read (`change.projection`)."""
    started = time.monotonic()
    if change.projection is not None:
        return _project_beside(spark, pipeline, tables, change.projection, change.record, started, out)
    _, _, archive, _ = resolve_range(tables, None, None)
    readable, _ = check_files(archive, False, out)
    out(f"redeploy {pipeline.name}: tiling {len(readable)} archive files under the changed definition, beside the "
        "live stream")
    parsed = parse_events(pipeline, read_archive(spark, tables, readable))
    reparsed = change.reparsed
    if reparsed:  # its dead letters too (jobs/rebase/reparse.py): one parse for both
        parsed = cached_for_two_passes(pipeline, parsed)
    try:
        (tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), SORT).write.format("delta")
         .mode("overwrite").option("overwriteSchema", "true").partitionBy("event_date").save(tables.path(TABLE)))
        dead = {"dead_letter_version": reparse.dead_letters_beside(pipeline, tables, parsed)} if reparsed else {}
    finally:
        parsed.unpersist()
    return {"version": definition.version(pipeline), "table_version": table_version(tables.path(TABLE)), **dead,
            "files": sorted(storage.relative(f.path, tables.archive) for f in readable),
            "seconds": round(time.monotonic() - started, 3)}


def _project_beside(spark: SparkSession, pipeline: Pipeline, tables: Tables, named: dict[str, str], record: dict,
                    started: float, out) -> dict:
    """The recorded tiles, read at the version the latest backfill merged or later, with each aggregation's partial
    columns taken from its recorded name's: tiles of `pipeline` with nothing recomputed. Tiles of the same columns
    (only the windows changed, not their panes) are not copied: they serve as they are."""
    by_agg = {new: old for a in pipeline.aggregations
              for new, old in zip(partial_names(a), partial_names(replace(a, name=named[a.name])))}
    keyed = partial_columns(pipeline.aggregations, keyed=True)
    windowed = ([WINDOW_PREFIX + c for c in partial_columns(pipeline.windows.aggregations)]
                if pipeline.windows is not None else [])
    version = table_version(tables.tiles)
    committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
    files = details.of(committed).tiled_files or []
    recorded_names = {n for n in record["outputs"] if not n.startswith("windows.")}
    if all(new == old for new, old in named.items()) and recorded_names == set(named):
        out(f"redeploy {pipeline.name}: the recorded tiles serve as they are (the windows are made again from them at "
            "the cut), nothing read from the archive")
        return {"version": definition.version(pipeline), "as_is": version, "files": files,
                "seconds": round(time.monotonic() - started, 3)}
    out(f"redeploy {pipeline.name}: aggregations only dropped or renamed: the recorded tiles' columns kept or renamed "
        "beside the live stream, nothing read from the archive")
    recorded = spark.read.format("delta").option("versionAsOf", version).load(tables.tiles)
    (recorded.select("event_date", *pipeline.keys, TILE_START, "kafka_partition",
                     *[F.col(by_agg.get(c, c)).alias(c) for c in keyed], *windowed)
     .write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy("event_date")
     .save(tables.path(TABLE)))
    return {"version": definition.version(pipeline), "table_version": table_version(tables.path(TABLE)),
            "files": files, "projected_from": version,
            "seconds": round(time.monotonic() - started, 3)}


def take_over(spark: SparkSession, pipeline: Pipeline, tables: Tables, beside: dict | None,
              out=logger.info) -> set[str] | None:
    """At the cut: the tiles made beside replace `tiles` when they are `pipeline`'s; returns the archive files the
    tiles hold then (relative to the archive), so that the cut tiles only the days of the files archived or tiled
    since (None: they cannot, and every day is tiled at the cut). A rollback's (`restore`: the `tiles` version kept
    with the previous definition's) are restored in one metadata commit, nothing copied."""
    if not beside or beside["version"] != definition.version(pipeline):
        return None
    if beside.get("as_is") is not None:  # of the same shape: the recorded tiles are this definition's
        committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
        return set(details.of(committed).tiled_files or [])
    if beside.get("restore") is not None:
        try:
            delta_upkeep.restore(tables.tiles, beside["restore"])
        except (DeltaError, OSError) as err:
            out(f"redeploy {pipeline.name}: the kept tiles of version {beside['restore']} cannot be restored "
                f"({str(err).splitlines()[0][:200]}); tiling every day again")
            return None
        out(f"redeploy {pipeline.name}: the tiles kept with this definition restored (tiles version "
            f"{beside['restore']})")
        return set(beside["files"])
    frame = spark.read.format("delta").option("versionAsOf", beside["table_version"]).load(tables.path(TABLE))
    (frame.write.format("delta").mode("overwrite").option("overwriteSchema", "true")
     .options(**fencing.spark_options(tables.tiles)).partitionBy("event_date").save(tables.tiles))
    out(f"redeploy {pipeline.name}: the tiles made beside the live stream replace the recorded definition's")
    return set(beside["files"])


def take_over_at_cut(spark: SparkSession, pipeline: Pipeline, tables: Tables, redeploy: RedeployPlan,
                     change: DefinitionChange, archive_end: dict[int, int], out=logger.info) -> set[str] | None:
    """At a redeploy's cut (`redeploy`: its request's plan, `change`: what it changes): the tiles made beside replace
    `tiles` (take_over), and when records parse otherwise, every archived record's dead letter is replaced by those
    made beside, or dropped when there are none (jobs/rebase/reparse.py). Returns the archive files the tiles hold
    (the cut tiles the days of the others); None: every archived day is to be tiled at the cut, its dead letters
    with it."""
    beside = redeploy.beside
    reparsed = change.reparsed
    if reparsed and (beside or {}).get("dead_letter_version") is None:
        beside = None  # tiles restored or projected carry no dead letters of the changed parse
    if reparsed and beside and not _holds_every_tiled_file(tables, beside):
        out(f"redeploy {pipeline.name}: the dead letters made beside miss archive files tiled since; tiling every "
            "day again")
        beside = None  # dead letters made beside are taken whole: they must cover every archived file
    held = take_over(spark, pipeline, tables, beside, out)
    if reparsed:
        reparse.archived_dead_letters(spark, tables, archive_end, beside if held is not None else None)
    if held is not None:
        faults.reach("redeploy.after_tiles")
    return held


def _holds_every_tiled_file(tables: Tables, beside: dict) -> bool:
    committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
    return set(details.of(committed).tiled_files or []) <= set(beside["files"])


def drop_beside(tables: Tables) -> None:
    """Once the changed definition is handed off, its tiles (and dead letters) made beside are in `tiles` (and
    `dead_letter`): the tables go."""
    for path in (tables.path(TABLE), tables.path(reparse.TABLE)):
        if storage.exists(path):
            storage.delete_tree(path)
