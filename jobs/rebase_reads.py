"""What a rebase reads of its topic up to the cut, fetched and parsed once, and the keyed state it folds from it.

A rebase reads the records past the archive's cut three times: the recomputed keyed state tiles [archive cut, C), the
streamed state folds [K, C) onto the drained state, and the events path catches up over [E, C) (jobs/rebase.py).
Fetched from Kafka in batch, 10^7 demo records take 12-21 s and their parse 37 s more on 2 cores
(docs/performance.md, "Where a rebase's time goes"), so `CutRecords` fetches and parses the range from the lowest of
those starts to the cut once, keeps it on local disk, and gives each step its part. A part outside it (a batch the
stream planned before E) is read on its own. When Kafka no longer retains the range's start (the archive must stand
in for what retention deleted) every part is read as before, with `retained_or_archived_range`."""

from __future__ import annotations

from functools import reduce
from operator import or_

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import SORT, state_from_partials, tiles_from_events
from switchyard.jobs.backfill import kafka_range, retained_or_archived_range
from switchyard.jobs.backfill.reconciliation import merged_over_all_keys
from switchyard.state_handoff.aggregates import partial_columns
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.parsing import parse_events
from switchyard.state_handoff.spec import Pipeline
from switchyard.state_handoff.tables import Tables

Offsets = dict[int, int]


class CutRecords:
    """The parsed records of `topic` in [start, end) per partition, read once when Kafka retains them all."""

    def __init__(self, spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, topic: str,
                 start: Offsets, end: Offsets):
        self.spark, self.pipeline, self.tables, self.bootstrap, self.topic = spark, pipeline, tables, bootstrap, topic
        self.start, self.end = start, end
        self.kept: DataFrame | None = None
        ranges = _ranges(start, end)
        earliest = {p: lo for p, (lo, _) in offset_bounds(bootstrap, topic).items()}
        if ranges and all(earliest.get(p, 0) <= lo for p, (lo, _) in ranges.items()):
            self.kept = parse_events(pipeline, kafka_range(spark, bootstrap, topic, start, end)).persist(
                StorageLevel.DISK_ONLY)

    def parsed(self, start: Offsets, end: Offsets, pipeline: Pipeline | None = None) -> DataFrame:
        """The parsed records of [start, end): the kept ones when they hold the range, else read now (parsed under
        `pipeline`, which must declare the same fields; this one's by default)."""
        ranges = _ranges(start, end)
        if self.kept is not None and all(self.start.get(p, 0) <= lo and hi <= self.end.get(p, 0)
                                         for p, (lo, hi) in ranges.items()):
            if not ranges:
                return self.kept.where(F.lit(False))
            return self.kept.where(reduce(or_, [(F.col("kafka_partition") == p) & (F.col("kafka_offset") >= lo)
                                                & (F.col("kafka_offset") < hi) for p, (lo, hi) in ranges.items()]))
        return parse_events(pipeline or self.pipeline,
                            retained_or_archived_range(self.spark, self.tables, self.bootstrap, self.topic, start, end))

    def unpersist(self) -> None:
        if self.kept is not None:
            self.kept.unpersist()


def _ranges(start: Offsets, end: Offsets) -> dict[int, tuple[int, int]]:
    return {p: (start.get(p, 0), hi) for p, hi in end.items() if hi > start.get(p, 0)}


def tiles_of(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed parsed records as tiles, sort-based, as the backfill makes them."""
    return tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), SORT)


def keyed_partials(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed parsed records as keyed partials, sort-based, as the backfill's tiles carry them."""
    return tiles_of(pipeline, parsed).select(*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True))


def streamed_state_at(spark: SparkSession, pipeline: Pipeline, tables: Tables, records: CutRecords, cut,
                      by_all_keys: bool = False) -> DataFrame:
    """The drained streamed state (at K) folded with the records of [K, C): the stream's state at `cut` (a
    jobs/rebase.py Cut; merged over all its keys with `by_all_keys`: a redeploy to another key, whose recorded state
    is keyed otherwise)."""
    columns = partial_columns(pipeline.aggregations, keyed=True)
    reader = spark.read.format("delta")
    if cut.state_version is not None:  # not what a crashed earlier attempt may have replaced it with
        reader = reader.option("versionAsOf", cut.state_version)
    drained = reader.load(tables.state).select(*(() if by_all_keys else pipeline.keys), *columns)
    rest = keyed_partials(pipeline, records.parsed(cut.keyed, cut.offsets, pipeline))
    if by_all_keys:
        return merged_over_all_keys(pipeline, drained.unionByName(rest.select(*columns)))
    return state_from_partials(pipeline, drained.unionByName(rest))
