"""The cut of a paused stream (jobs/rebase/run.py): where its two readers' batches ended and the topic's end there; the
records up to it, fetched and parsed once; the events path caught up to it with the stream's own sink; and the
streamed keyed state folded up to it, which the reconciliation compares with the recomputed state.

A rebase reads the records past the archive's cut three times: the recomputed keyed state tiles [archive cut, C), the
streamed state folds [K, C) onto the drained state, and the events path catches up over [E, C). Fetched from Kafka in
batch, 10^7 demo records take 13-23 s and their parse about 22 s more on 2 cores (docs/performance.md, "Where a
rebase's time goes"), so `CutRecords` fetches and parses the range from the lowest of those starts to the cut once,
keeps it on local disk, and gives each step its part. A part outside it (a batch the stream planned before E) is read
on its own; when Kafka no longer retains the range's start (the archive stands in for what retention deleted), every
part is read as before. The catch-up takes [E, C) in batches of at most CATCH_UP_BATCH offsets, as the stream would
take it in micro-batches: the events sink keeps a batch on the executors while it writes, and one batch of a
whole burst (9.5 million records) ran a 2 GB heap out of memory."""

from __future__ import annotations

from datetime import datetime
from functools import reduce
from operator import or_

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import SORT, state_from_partials, tiles_from_events
from switchyard.jobs.backfill import kafka_range, retained_or_archived_range
from switchyard.jobs.delta_txn import TxnApp
from switchyard.jobs.rebase.reconciliation import merged_over_all_keys
from switchyard.jobs.sinks import EventsSink, mark_overlap
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.requests import Cut
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.kafka_io import latest_offsets, offset_bounds
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import (batch_end_offsets, committed_end_offsets, last_committed_batch,
                                                         last_planned_batch, planned_end_offsets)
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

Offsets = dict[int, int]
CATCH_UP_BATCH = 2_000_000  # offsets per catch-up batch, over all partitions


def pause_cut(bootstrap: str, tables: Tables, handoff: Handoff, paths: StreamPaths) -> Cut:
    """The cut of a stopped stream: the topic's end now, where each reader's batches ended (for the events
    query, its last planned batch, which the catch-up completes as planned), and the version of the drained state."""
    from deltalake import DeltaTable

    start = handoff.start_offsets
    keyed = committed_end_offsets(paths.keyed_checkpoint, handoff.topic) or {}
    events = planned_end_offsets(paths.events_checkpoint, handoff.topic) or {}
    latest = latest_offsets(bootstrap, [handoff.topic])[handoff.topic]
    keyed = {p: keyed.get(p, start.get(p, 0)) for p in latest}
    events = {p: events.get(p, start.get(p, 0)) for p in latest}
    drained = DeltaTable(tables.state, storage_options=storage.delta_options(tables.state)).version()
    return Cut({p: max(hi, keyed[p], events[p]) for p, hi in latest.items()}, keyed, events, drained)


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
            # Made now, by one job. Left to the first query that reads it, every scan of it in that query's plan
            # (the reconciliation scans several parts) makes it at once, as a job of its own under adaptive
            # execution, and each task of one job waits for the block a task of the other is computing: at 10^7
            # the fetch and parse took 77.6 s on 2 cores, 58 of its 155 task-seconds spent waiting.
            self.kept.count()

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


def batched(start: Offsets, end: Offsets, size: int) -> list[tuple[Offsets, Offsets]]:
    """[start, end) as consecutive ranges of at most about `size` offsets in all, each partition advancing by an equal
    share while it has offsets left; one range (maybe empty) when it holds no more."""
    at = {p: start.get(p, 0) for p in end}
    busy = [p for p in end if end[p] > at[p]]
    if sum(end[p] - at[p] for p in busy) <= size:
        return [(at, dict(end))]
    step = max(1, size // len(busy))
    pieces = []
    while any(end[p] > at[p] for p in end):
        ahead = {p: min(end[p], at[p] + step) if end[p] > at[p] else at[p] for p in end}
        pieces.append((at, ahead))
        at = ahead
    return pieces


def catch_up_events(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, handoff: Handoff,
                    paths: StreamPaths, cut: Cut, records: CutRecords | None = None) -> datetime | None:
    """The events path up to the cut as the stream's next batches, with the stream's own sink and transaction
    ids, so a rerun writes nothing twice: first a batch an interrupted run had planned, over exactly its planned
    range (its writes may be half done), then [E, C) in batches of at most CATCH_UP_BATCH offsets (cut the same way
    by every rerun at the cut). Returns the watermark at the cut. `records`: the rebase's range, read once (a
    handoff overlapping the archive reads its own, with the Kafka keys it compares by)."""
    checkpoint = paths.events_checkpoint
    sink = EventsSink(pipeline, tables, handoff,
                      TxnApp(f"switchyard-{pipeline.name}-{handoff.handoff_id}-events", checkpoint,
                             missing="unstreamed"))
    str(sink.app)  # the checkpoint's incarnation, read once now: every batch below is tagged with it

    def run(start: Offsets, end: Offsets, batch_id: int, planned: bool = False) -> datetime | None:
        # an empty planned batch still gets its row: the batch after it takes its watermark from there
        if not planned and all(end[p] <= start.get(p, 0) for p in end):
            return sink.watermark_before(batch_id)
        # a batch the stream planned carries the range the stream's own attempt recorded, if it got that far
        offsets = sink.planned_range(batch_id) if planned else stream_progress.offset_range(start, end)
        if handoff.overlap is None and records is not None:
            parsed = records.parsed(start, end, pipeline)
        else:
            parsed = parse_events(pipeline, kafka_range(spark, bootstrap, handoff.topic, start, end, with_key=True)
                                  if handoff.overlap else
                                  retained_or_archived_range(spark, tables, bootstrap, handoff.topic, start, end))
        if handoff.overlap is not None:
            parsed = mark_overlap(pipeline, parsed, spark.read.parquet(handoff.overlap.path), handoff.overlap)
        sink(parsed, batch_id, offsets=offsets)  # recorded over the same range: done; over another: refused
        return sink.last.watermark_after

    committed, planned = last_committed_batch(checkpoint), last_planned_batch(checkpoint)
    next_id = 0 if committed is None else committed + 1
    if planned is not None and planned >= next_id:
        before = batch_end_offsets(checkpoint, committed, handoff.topic) if committed is not None else {}
        ends = batch_end_offsets(checkpoint, planned, handoff.topic)
        start = {p: before.get(p, handoff.start_offsets.get(p, 0)) for p in ends}
        run(start, ends, planned, planned=True)
        next_id = planned + 1
    watermark = None
    for batch_id, (start, end) in enumerate(batched(cut.events, cut.offsets, CATCH_UP_BATCH), next_id):
        watermark = run(start, end, batch_id)
    return watermark


def tiles_of(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed parsed records as tiles, sort-based, as the backfill makes them."""
    return tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), SORT)


def keyed_partials(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed parsed records as keyed partials, sort-based, as the backfill's tiles carry them."""
    return tiles_of(pipeline, parsed).select(*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True))


def streamed_state_at(spark: SparkSession, pipeline: Pipeline, tables: Tables, records: CutRecords, cut: Cut,
                      by_all_keys: bool = False, rest: DataFrame | None = None) -> DataFrame:
    """The drained streamed state (at K) folded with the records of [K, C): the stream's state at the cut (merged
    over all its keys with `by_all_keys`: a redeploy to another key, whose recorded state is keyed otherwise).
    `rest`: the keyed partials of [K, C), when made already (`TilesAtCut`)."""
    columns = partial_columns(pipeline.aggregations, keyed=True)
    reader = spark.read.format("delta")
    if cut.state_version is not None:  # not what a crashed earlier attempt may have replaced it with
        reader = reader.option("versionAsOf", cut.state_version)
    drained = reader.load(tables.state).select(*(() if by_all_keys else pipeline.keys), *columns)
    if rest is None:
        rest = keyed_partials(pipeline, records.parsed(cut.keyed, cut.offsets, pipeline))
    if by_all_keys:
        return merged_over_all_keys(pipeline, drained.unionByName(rest.select(*columns)))
    return state_from_partials(pipeline, drained.unionByName(rest))


class TilesAtCut:
    """The tiles of the two Kafka ranges a rebase folds into keyed state: [archive cut, C) for the recomputed state,
    [K, C) for the streamed state. The part both cover, [max(archive cut, K), C), is tiled once and kept on local
    disk (after a burst it is nearly all of both); each range's own part below it is tiled on its own."""

    def __init__(self, pipeline: Pipeline, records: CutRecords, archive_end: Offsets, cut: Cut):
        both = {p: max(archive_end.get(p, 0), cut.keyed.get(p, 0)) for p in cut.offsets}
        self.pipeline = pipeline
        self.shared = tiles_of(pipeline, records.parsed(both, cut.offsets)).persist(StorageLevel.DISK_ONLY)
        self.past = self._with(records, archive_end, both, self.shared)
        self.streamed_rest = self._with(records, cut.keyed, both, self.shared).select(
            *pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True))

    def _with(self, records: CutRecords, start: Offsets, both: Offsets, shared: DataFrame) -> DataFrame:
        if not _ranges(start, both):
            return shared
        return tiles_of(self.pipeline, records.parsed(start, both)).unionByName(shared)

    def unpersist(self) -> None:
        self.shared.unpersist()
