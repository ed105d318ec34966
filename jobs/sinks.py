"""The events path's Delta sinks, shared by the stream and the batch paths.

`EventsSink` takes one batch of parsed records: malformed ones to `dead_letter`, records for windows at or
before the watermark to `late`, the others merged into `window_state`; windows that the watermark passes move to
`windows`. The watermark starts at the backlog watermark; each batch records the one it leaves in Delta
(`stream_batches`) with the offset range it read, so a replayed batch classifies its records exactly as the first
attempt did, and a batch id asked again over another range is refused instead of skipped. Dead letters and late
rows go in once per record, whichever path wrote it first: a batch's few through delta-rs, many (their values can
be large) by Spark's executors, so none strains the driver; the other writes are small and go through delta-rs. The
stream's
events query runs it on each micro-batch; the rebase runs it over the range up to its cut, as the stream's next
batch. The backfill writes its dead letters with `dead_letter_rows` and makes the tables the stream appends to.
"""

from __future__ import annotations

from datetime import datetime, timezone

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import tile_start, window_end, window_starts
from switchyard.jobs.delta_txn import TxnApp, append_arrow_once, delete_once, keys_equal, merge_once
from switchyard.jobs.handoff import record_identity
from switchyard.state_handoff import faults
from switchyard.state_handoff.control.handoffs import Handoff, Overlap
from switchyard.state_handoff.io import delta_upkeep, fencing, storage
from switchyard.state_handoff.language.aggregates import (event_aggregations, flatten_last, merge_into_sql,
                                                          sketch_columns, union_sketches)
from switchyard.state_handoff.language.parsing import dead_letter_value
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import batch_end_offsets
from switchyard.state_handoff.tables import Tables

SKIPPED_OVERLAP = "skipped_overlap"
# A batch's bad records (dead letters and late rows) whose values hold at most this many bytes are collected and
# appended through delta-rs, with no Spark job of their own; larger ones are written by the executors.
DRIVER_BAD_BYTES = 8 << 20


def mark_overlap(pipeline: Pipeline, parsed: DataFrame, archived: DataFrame, overlap: Overlap) -> DataFrame:
    """SKIPPED_OVERLAP: the record is in the overlap (Kafka timestamp at or before its end) and its identity is
    among the archived ones; a left join on the small static identity set, so the stream keeps every row."""
    identities = archived.select(F.col("identity").alias("__archived_identity")).distinct()
    in_overlap = F.col("kafka_timestamp") <= F.lit(overlap.until)
    return (parsed.withColumn("__identity", F.when(in_overlap, record_identity(pipeline)))
            .join(F.broadcast(identities), F.col("__identity") == F.col("__archived_identity"), "left")
            .withColumn(SKIPPED_OVERLAP, F.col("__archived_identity").isNotNull())
            .drop("__identity", "__archived_identity"))


def batch_window_partials(pipeline: Pipeline, on_time: DataFrame) -> DataFrame:
    aggs = pipeline.windows.aggregations
    return (on_time.groupBy(*pipeline.keys, "window_start").agg(*event_aggregations(pipeline, aggs))
            .select(*pipeline.keys, "window_start", window_end(pipeline, F.col("window_start")).alias("window_end"),
                    *flatten_last(aggs)))


class EventsSink:
    def __init__(self, pipeline: Pipeline, tables: Tables, handoff: Handoff, app: TxnApp):
        self.pipeline, self.tables, self.handoff, self.app = pipeline, tables, handoff, app
        self.last: stream_progress.BatchRow | None = None  # the newest batch this process recorded
        self._delta: dict[str, object] = {}  # deltalake DeltaTables by path, loaded once
        self._bad_bytes: int | None = None

    def _table(self, path: str):
        """The table at `path` for delta-rs: the batch's writes go through it, not through Spark's Delta
        commands, whose plans, jobs and JIT work take the cores from the keyed path."""
        from deltalake import DeltaTable

        if path not in self._delta:
            self._delta[path] = DeltaTable(path, storage_options=storage.delta_options(path))
        return self._delta[path]

    def watermark_before(self, batch_id: int) -> datetime | None:
        """The backlog watermark for batch 0; else the watermark the previous batch recorded in Delta."""
        if batch_id == 0:
            return self.handoff.backlog_watermark
        previous = self.last if self.last is not None and self.last.batch_id == batch_id - 1 else \
            stream_progress.batch(self.tables, self.handoff.handoff_id, stream_progress.EVENTS,
                                  self.app.incarnation, batch_id - 1)
        if previous is None:
            raise RuntimeError(
                f"events batch {batch_id - 1} of handoff {self.handoff.handoff_id} (checkpoint "
                f"{self.app.incarnation}) is committed in its checkpoint but missing from "
                f"{self.tables.stream_batches}: its watermark is lost; restore that table, or start over with "
                "`switchyard backfill` and `switchyard handoff`")
        return previous.watermark_after

    def planned_range(self, batch_id: int) -> dict[str, list[int | None]]:
        """The range Spark planned for a batch of the stream's events query, from its checkpoint's offset log
        (written before the batch runs): [end of the batch before (the handoff's start for batch 0), its end)."""
        checkpoint, topic = self.app.checkpoint, self.handoff.topic
        end = batch_end_offsets(checkpoint, batch_id, topic)
        start = batch_end_offsets(checkpoint, batch_id - 1, topic) if batch_id else self.handoff.start_offsets
        return stream_progress.offset_range(start, end)

    def __call__(self, batch: DataFrame, batch_id: int, offsets: dict[str, list[int | None]] | None = None) -> None:
        """Write batch `batch_id`, which reads `offsets` (per partition [start, end); the stream's planned range
        when None). A batch recorded over the same range is done; over another, refused (BatchRangeConflict)."""
        started = datetime.now(timezone.utc)
        pipeline, tables = self.pipeline, self.tables
        str(self.app)  # the checkpoint's incarnation, read before the batch's first write
        offsets = self.planned_range(batch_id) if offsets is None else offsets
        done = stream_progress.committed_batch(tables, self.handoff.handoff_id, stream_progress.EVENTS,
                                               self.app.incarnation, batch_id)
        if done is not None:
            stream_progress.check_same_range(done, offsets, tables.stream_batches)
            self.last = done  # every write of the batch came before its row
            return
        watermark = self.watermark_before(batch_id)
        batch = batch.persist()
        try:
            skipping = SKIPPED_OVERLAP in batch.columns
            kept = ~F.col(SKIPPED_OVERLAP) if skipping else F.lit(True)
            well = F.col("error").isNull() & kept
            malformed = F.col("error").isNotNull() & kept
            windows = pipeline.windows is not None
            # a record's windows (one for tumbling windows), each late once the watermark has passed its end
            events = batch.withColumn("__windows", window_starts(pipeline, tile_start(pipeline)) if windows
                                      else F.array().cast("array<timestamp>"))
            late_window = (lambda start: window_end(pipeline, start) <= F.lit(watermark)) if windows and watermark \
                else (lambda start: F.lit(False))
            events = events.withColumn("__late", F.when(well, F.size(F.filter("__windows", late_window)))
                                       .otherwise(F.lit(0)))
            per_partition, newest, ranges, bad_bytes = self._count(events, well, malformed, kept, skipping)
            small = bad_bytes <= self._driver_bad_bytes(batch)
            if any(p["dead_lettered"] for p in per_partition.values()):
                dead = dead_letter_rows(pipeline, events.where(malformed), "stream")
                self._append_new(dead, tables.dead_letter, ["kafka_partition", "kafka_offset"], ranges, small,
                                 "dead", batch_id)
                faults.reach("stream.events.after_dead_letter")
            memberships = events.where(well).withColumn("window_start", F.explode("__windows"))
            memberships = memberships.withColumn("__late", late_window(F.col("window_start")))
            if any(p["late"] for p in per_partition.values()):
                late = memberships.where("__late").select(
                    "kafka_partition", "kafka_offset", *pipeline.keys, pipeline.event_time, "window_start",
                    F.lit(watermark).alias("watermark"), "value", F.current_timestamp().alias("recorded_at"))
                self._append_new(late, tables.late, ["kafka_partition", "kafka_offset", "window_start"], ranges,
                                 small, "late", batch_id)
            watermark_after = watermark
            if windows:
                on_time = memberships.where(~F.col("__late"))
                if any(p["well_formed"] * pipeline.windows.per_record - p["late"] for p in per_partition.values()):
                    self._merge_windows(batch_window_partials(pipeline, on_time), batch_id)
                    faults.reach("stream.events.after_window_merge")
                if newest is not None:
                    candidate = newest - pipeline.allowed_lateness
                    watermark_after = max(watermark, candidate) if watermark else candidate
                if watermark_after and (watermark is None or _window_index(pipeline, watermark_after)
                                        > _window_index(pipeline, watermark)):
                    self._finalize_windows(watermark_after, batch_id)
        finally:
            batch.unpersist()
        row = stream_progress.BatchRow(self.handoff.handoff_id, stream_progress.EVENTS, self.app.incarnation,
                                       batch_id, watermark, watermark_after,
                                       {str(p): counts for p, counts in per_partition.items()}, started,
                                       datetime.now(timezone.utc), offsets)
        stream_progress.record(tables, row)
        self.last = row
        faults.reach("stream.events.after_progress")
        if delta_upkeep.due(batch_id):
            for table in self._delta.values():  # the tables this sink wrote, each only by this thread
                delta_upkeep.tidy(table)

    def _count(self, events: DataFrame, well, malformed, kept, skipping: bool):
        """One job over the batch: per partition its accounting (read, well-formed, dead-lettered, late, skipped) and
        last offset; the newest event time; each partition's offset range; and the bytes of its bad values."""
        stats = events.groupBy("kafka_partition").agg(
            F.count(F.lit(1)).alias("read"), F.count_if(well).alias("well_formed"),
            F.count_if(malformed).alias("dead_lettered"), F.sum("__late").cast("long").alias("late"),
            F.count_if(~kept).alias(SKIPPED_OVERLAP),
            F.min("kafka_offset").alias("first_offset"), F.max("kafka_offset").alias("last_offset"),
            F.sum(F.when(malformed, F.octet_length("value")).when(well, F.octet_length("value") * F.col("__late"))
                  .otherwise(0)).alias("bad_bytes"),
            F.max(F.when(well, F.col(self.pipeline.event_time))).alias("newest")).collect()
        per_partition = {int(r.kafka_partition): {"read": r.read, "well_formed": r.well_formed,
                                                  "dead_lettered": r.dead_lettered, "late": r.late,
                                                  "last_offset": r.last_offset} for r in stats}
        if skipping:
            for r in stats:
                per_partition[int(r.kafka_partition)][SKIPPED_OVERLAP] = r[SKIPPED_OVERLAP]
        newest = max((r.newest for r in stats if r.newest is not None), default=None)
        ranges = {int(r.kafka_partition): (r.first_offset, r.last_offset) for r in stats}
        return per_partition, newest, ranges, sum(r.bad_bytes or 0 for r in stats)

    def _driver_bad_bytes(self, batch: DataFrame) -> int:
        """How many bytes of bad values a batch may collect: DRIVER_BAD_BYTES, and a quarter of the driver's result
        limit at most."""
        if self._bad_bytes is None:
            limit = _bytes(_driver_conf(batch.sparkSession, "spark.driver.maxResultSize", "1g"))
            self._bad_bytes = min(DRIVER_BAD_BYTES, limit // 4) if limit else DRIVER_BAD_BYTES
        return self._bad_bytes

    def _append_new(self, rows: DataFrame, path: str, key: list[str], ranges: dict[int, tuple[int, int]],
                    small: bool, kind: str, batch_id: int) -> None:
        """Bad records the table does not hold yet (`append_new`): a batch's few through delta-rs, once per batch
        id, with no Spark job of their own; a batch whose bad values could strain the driver by Spark's writer."""
        table = self._table(path)  # tidied with the tables the batch wrote through delta-rs
        if not small:
            append_new(rows, path, key, ranges)
            return
        import pyarrow.compute as pc

        new = rows.toArrow()
        in_ranges = None
        for partition, (first, last) in sorted(ranges.items()):
            one = (pc.field("kafka_partition") == partition) & (pc.field("kafka_offset") >= first) & \
                (pc.field("kafka_offset") <= last)
            in_ranges = one if in_ranges is None else in_ranges | one
        table.update_incremental()  # another path (the backfill, Spark's writer) may have appended since
        held = table.to_pyarrow_dataset().to_table(columns=key, filter=in_ranges)
        if held.num_rows:
            new = new.join(held, key, join_type="left anti")
        append_arrow_once(table, _arrow_conformed(new, table), f"{self.app}-{kind}", batch_id)

    def _merge_windows(self, partials: DataFrame, batch_id: int) -> None:
        table, source = self._table(self.tables.window_state), partials.toArrow()
        keys = [*self.pipeline.keys, "window_start"]
        sketches = sketch_columns(self.pipeline.windows.aggregations)
        if sketches:
            source = union_sketches(source, _rows_by_key(table, source, keys, sketches), keys, sketches)
        merge_once(table, source, keys_equal(keys), f"{self.app}-windows-merge", batch_id,
                   updates=merge_into_sql(self.pipeline.windows.aggregations))

    def _finalize_windows(self, watermark: datetime, batch_id: int) -> None:
        import pyarrow as pa
        import pyarrow.compute as pc

        open_windows = self._table(self.tables.window_state)
        open_windows.update_incremental()
        bound = watermark.astimezone(timezone.utc)
        final = open_windows.to_pyarrow_dataset().to_table(
            filter=pc.field("window_end") <= pa.scalar(bound, pa.timestamp("us", tz="UTC")))
        append_arrow_once(self._table(self.tables.windows), final, f"{self.app}-windows-final", batch_id)
        faults.reach("stream.events.after_finalize_append")
        delete_once(open_windows, f"window_end <= arrow_cast('{bound:%Y-%m-%dT%H:%M:%S.%f}Z', "
                    "'Timestamp(Microsecond, Some(\"UTC\"))')", f"{self.app}-windows-close", batch_id)


def _rows_by_key(table, source, keys: list[str], columns: list[str]) -> dict:
    """The rows of delta-rs's `table` in the windows `source` touches, as key tuple -> {column: value}."""
    import pyarrow.compute as pc

    table.update_incremental()
    starts = source.column("window_start").unique()
    found = table.to_pyarrow_dataset().to_table(columns=[*keys, *columns],
                                                filter=pc.field("window_start").isin(starts))
    return {tuple(row[k] for k in keys): row for row in found.to_pylist()}


def append_new(rows: DataFrame, path: str, key: list[str], ranges: dict[int, tuple[int, int]]) -> None:
    """Append `rows` (bad records: dead letters or late rows) to the Delta table at `path` with Spark's writer, so
    the executors write their values and none reaches the driver; rows whose `key` the table already holds among
    the offsets `ranges` (per partition, first and last offset of the batch) are left out. So a batch replayed
    after its append committed adds nothing, and neither does a batch over records another path wrote first (the
    backfill of an archive grown past the stream): a record is in the table once. Keys, not an app transaction,
    make the append exactly once: the one app transaction a Spark write carries is the lease's fence."""
    held = rows.sparkSession.read.format("delta").load(path)
    in_ranges = F.lit(False)
    for partition, (first, last) in sorted(ranges.items()):
        in_ranges = in_ranges | ((F.col("kafka_partition") == partition) & F.col("kafka_offset").between(first, last))
    new = conformed(rows.join(held.where(in_ranges).select(*key), key, "left_anti"), held.schema)
    new.write.format("delta").mode("append").options(**fencing.spark_options(path)).save(path)


def _driver_conf(spark, key: str, default: str) -> str:
    """A setting of the driver's SparkConf (the session's runtime conf does not hold what spark-submit was given)."""
    try:
        return spark.sparkContext.getConf().get(key, default)
    except Exception:  # a session without a SparkContext in this process (Spark Connect)
        return spark.conf.get(key, default)


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _bytes(size: str) -> int:
    """A Spark size ("1g", "512m", "1024k", "0" for none) in bytes; 1g when it does not read."""
    text = size.strip().lower().removesuffix("b")
    number = text.rstrip("kmgt")
    try:
        return int(float(number) * _UNITS[text[len(number):]])
    except (KeyError, ValueError):
        return 1 << 30


def _arrow_conformed(data, table):
    """`data` with the columns of the delta-rs `table` in its order: a table made before a column was added keeps
    its schema."""
    import pyarrow as pa

    schema = pa.schema(table.schema())
    return data.select([name for name in schema.names if name in data.column_names])


def conformed(rows: DataFrame, schema) -> DataFrame:
    """`rows` with the columns of a table's Spark `schema`, in its order and types: a table made before a column
    was added keeps its schema."""
    return rows.select(*[F.col(f.name).cast(f.dataType) for f in schema.fields if f.name in rows.columns])


def _window_index(pipeline: Pipeline, t: datetime) -> int:
    """Which of the `every`-long steps `t` is in: windows end at each step's start."""
    return int(t.timestamp() // pipeline.windows.slide.total_seconds())


def dead_letter_rows(pipeline: Pipeline, malformed: DataFrame, phase: str, event_date: F.Column | None = None):
    """`dead_letter`'s rows for parsed records that failed to parse: dated by their event time when it parsed,
    else by their Kafka timestamp (`event_date`: a date the records already carry, as archived ones do). Each keeps
    its value's size and the value itself, cut to a bounded prefix when it is above the record size limit: the cut
    is Spark's, so a batch of huge records never reaches the driver whole."""
    if event_date is None:
        event_date = F.coalesce(F.to_date(pipeline.event_time), F.to_date("kafka_timestamp"))
    return malformed.select("kafka_partition", "kafka_offset", dead_letter_value().alias("value"),
                            F.octet_length("value").cast("long").alias("value_bytes"), F.col("error").alias("reason"),
                            F.lit(phase).alias("phase"), F.current_timestamp().alias("recorded_at"),
                            event_date.alias("event_date"))


def ensure_tables(pipeline: Pipeline, tables: Tables) -> None:
    """Tables the stream appends to but the backfill may not have made (no malformed or late records yet),
    created empty through delta-rs: Spark's empty writes cost a job and a commit each."""
    from deltalake import DeltaTable

    for path, (schema, partition_by) in appended_tables(pipeline, tables).items():
        if not storage.exists(storage.join(path, "_delta_log")):
            DeltaTable.create(path, schema, mode="ignore", partition_by=partition_by,
                              storage_options=storage.delta_options(path))


def appended_tables(pipeline: Pipeline, tables: Tables) -> dict:
    """The tables only the stream's events path appends to, each as (its pyarrow schema, its partition columns):
    `late`'s schema follows the pipeline's key fields and event time."""
    import pyarrow as pa

    utc = pa.timestamp("us", tz="UTC")
    return {
        tables.dead_letter: (pa.schema([("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                                        ("value", pa.binary()), ("value_bytes", pa.int64()), ("reason", pa.string()),
                                        ("phase", pa.string()),
                                        ("recorded_at", utc), ("event_date", pa.date32())]), ["event_date"]),
        tables.late: (pa.schema([("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                                 *[(f.name, {"number": pa.float64(), "timestamp": utc}.get(f.type, pa.string()))
                                   for k in pipeline.keys for f in pipeline.fields if f.name == k],
                                 (pipeline.event_time, utc), ("window_start", utc),
                                 ("watermark", utc), ("value", pa.binary()), ("recorded_at", utc)]), None),
    }
