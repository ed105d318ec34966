"""Keyed aggregation as DataFrame transforms: events to tiles (sort-based, FLIP-140 style), tiles to state and windows."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from switchyard.state_handoff.language.aggregates import (LAST_BY_TIME, WINDOW_PREFIX, event_aggregations, flatten_last,
                                                          merge_aggregations, partial_columns)
from switchyard.state_handoff.language.spec import Pipeline

TILE_START = "tile_start"
SORT = "sort"
HASH = "hash"


def tile_start(pipeline: Pipeline) -> F.Column:
    """The tile a record belongs to: its window's pane (the window itself for tumbling windows) when the pipeline
    has windows, else its day."""
    event_time = F.col(pipeline.event_time)
    if pipeline.windows is None:
        return F.date_trunc("day", event_time)
    seconds = int(pipeline.windows.slide.total_seconds())
    epoch = F.unix_seconds(event_time)
    return F.timestamp_seconds(epoch - F.pmod(epoch, F.lit(seconds)))


def window_starts(pipeline: Pipeline, pane: F.Column) -> F.Column:
    """The starts of the windows a pane lies in (one for tumbling windows), latest first."""
    slide = int(pipeline.windows.slide.total_seconds())
    return F.transform(F.sequence(F.lit(0), F.lit(pipeline.windows.per_record - 1)),
                       lambda k: F.timestamp_seconds(F.unix_seconds(pane) - k * F.lit(slide)))


def tiles_from_events(pipeline: Pipeline, events: DataFrame, strategy: str = SORT) -> DataFrame:
    """Partial aggregates per (key, tile, kafka_partition) from well-formed parsed events.

    SORT: repartition by key, sort within partitions by (key, tile, partition, event_time), then one pass per
    group (SortAggregate; no hash map of all keys, spills through the sort). HASH: a plain groupBy left to
    Spark's planner; with a `last` aggregation (a max over a struct holding a string) Spark cannot use its
    hash aggregate and plans a partial aggregation before the shuffle plus a sort-based final one.
    """
    grain = [*pipeline.keys, TILE_START, "kafka_partition"]
    events = events.withColumn(TILE_START, tile_start(pipeline))
    if strategy == SORT:
        events = events.repartition(*pipeline.keys).sortWithinPartitions(*grain, pipeline.event_time)
    elif strategy != HASH:
        raise ValueError(f"aggregation strategy must be {SORT} or {HASH}, not {strategy!r}")
    keyed = event_aggregations(pipeline, pipeline.aggregations, keyed=True)
    windowed = event_aggregations(pipeline, pipeline.windows.aggregations, WINDOW_PREFIX) if pipeline.windows else []
    tiles = events.groupBy(*grain).agg(*keyed, *windowed)
    return tiles.select(
        F.to_date(TILE_START).alias("event_date"), *grain,
        *flatten_last(pipeline.aggregations, keyed=True),
        *(flatten_last(pipeline.windows.aggregations, WINDOW_PREFIX) if pipeline.windows else []),
    )


def state_from_partials(pipeline: Pipeline, partials: DataFrame) -> DataFrame:
    """One row per key: merge any rows carrying keyed partial columns (tiles, old state, a micro-batch)."""
    return (partials.groupBy(*pipeline.keys).agg(*merge_aggregations(pipeline.aggregations, keyed=True))
            .select(*pipeline.keys, *flatten_last(pipeline.aggregations, keyed=True)))


def window_partials_from_tiles(pipeline: Pipeline, tiles: DataFrame) -> DataFrame:
    """One row per (key, window): window_start, window_end and the window's partial columns."""
    aggs = pipeline.windows.aggregations
    panes = tiles.select(*pipeline.keys, TILE_START, *[F.col(WINDOW_PREFIX + c).alias(c) for c in partial_columns(aggs)])
    renamed = panes.select(*pipeline.keys, F.explode(window_starts(pipeline, F.col(TILE_START))).alias("window_start"),
                           *partial_columns(aggs))
    return window_partials_merged(pipeline, renamed).withColumn(
        "window_end", window_end(pipeline, F.col("window_start"))
    ).select(*pipeline.keys, "window_start", "window_end", *partial_columns(aggs))


def window_end(pipeline: Pipeline, start: F.Column) -> F.Column:
    """The end of the window starting at `start` (a tile's start is its window's)."""
    return start + F.expr(f"INTERVAL {int(pipeline.windows.size.total_seconds())} SECONDS")


def window_partials_merged(pipeline: Pipeline, partials: DataFrame) -> DataFrame:
    """One row per (key, window_start): merge any rows carrying the window's partial columns."""
    aggs = pipeline.windows.aggregations
    return (partials.groupBy(*pipeline.keys, "window_start").agg(*merge_aggregations(aggs))
            .select(*pipeline.keys, "window_start", *flatten_last(aggs)))


def newest_event_time(partials: DataFrame) -> datetime | None:
    """The newest event time over rows carrying keyed partials (tiles or state)."""
    return partials.agg(F.max(LAST_BY_TIME)).first()[0]


def backlog_watermark(pipeline: Pipeline, newest: datetime | None) -> datetime | None:
    """Flink's greatest backlog watermark: newest event time minus the allowed lateness."""
    return None if newest is None else newest - pipeline.allowed_lateness
