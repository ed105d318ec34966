"""The commit's writes of its outputs: the keyed state, the windows split at the backlog watermark, and `late`
emptied when the windows are made again at a cut."""

from __future__ import annotations

from datetime import datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from switchyard.jobs.aggregation import TILE_START, window_end, window_partials_from_tiles
from switchyard.jobs.backfill.backlog import table_version
from switchyard.jobs.seed import UPDATE_VERSION
from switchyard.jobs.sinks import appended_tables
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables


def write_state(tables: Tables, state: DataFrame) -> int:
    """`state` replaced by the merged keyed state, every row at update version 0; returns the version written."""
    (state.withColumn(UPDATE_VERSION, F.lit(0).cast("long"))
     .write.format("delta").mode("overwrite").option("overwriteSchema", "true")
     .options(**fencing.spark_options(tables.state)).save(tables.state))
    return table_version(tables.state)


def write_windows(pipeline: Pipeline, tables: Tables, tiles: DataFrame, watermark: datetime,
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


def empty_late(spark: SparkSession, pipeline: Pipeline, tables: Tables) -> None:
    """`late` emptied, in one commit: its rows are in the windows made again at a redeploy's cut. Its schema is
    `pipeline`'s (a changed definition's key fields or event time name other columns)."""
    schema, _ = appended_tables(pipeline, tables)[tables.late]
    (spark.createDataFrame([], from_arrow_schema(schema)).write.format("delta").mode("overwrite")
     .option("overwriteSchema", "true").options(**fencing.spark_options(tables.late)).save(tables.late))
