"""`switchyard stream` (isBacklog = false): Structured Streaming from the handoff offsets, keyed state seeded once.

Three queries, each with its own checkpoint; the first two read the topic from the handoff's start offsets:
- keyed: the seed (the state snapshot at the handoff's version, as a file stream source) unioned with the
  parsed events, merged by one streaming aggregation on the RocksDB state store. The seed's files are
  recorded in the checkpoint, so a restart never seeds again. Each batch sends the changed keys' new state to
  `<pipeline>.updates` and does nothing else: no Delta write sits between an input record and its update.
- state: reads this handoff's updates back from `<pipeline>.updates` and upserts the newest per key into
  `state`. An update is the key's whole state, so applying one twice (a replayed keyed batch resends it) or
  late changes nothing; a stop drains it, so `state` holds every update when the stream stops.
- events: per batch, malformed records to `dead_letter`, records for windows at or before the watermark
  to `late`, the others merged into `window_state`; windows that the watermark passes move to `windows`.
  The watermark starts at the backlog watermark and each batch records the one it leaves in Delta
  (`stream_batches`), so a replayed batch classifies its records exactly as the first attempt did.
Every Delta write of a batch carries (txnAppId, txnVersion = batch id), the app id naming the handoff and the
incarnation of the query's checkpoint, so a replay writes nothing twice and a new checkpoint is never taken
for an old one. What a restart needs is in the checkpoints or in Delta; files beside them are caches.
With a handoff in time mode, records the archive already holds (the handoff's overlap) are marked once on the
parsed input: the keyed query leaves them out, the events query counts them as `skipped_overlap`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.aggregation import tile_start
from state_handoff import faults, handoff_log, stream_progress
from state_handoff.aggregates import (event_aggregations, event_as_partial, flatten_last,
                                      merge_aggregations, merge_into, partial_columns)
from state_handoff.errors import Failed, UserError
from state_handoff.handoff import Handoff, Overlap, current_handoff, record_identity
from state_handoff.kafka_io import create_topic, latest_offsets
from state_handoff.parsing import parse_events
from state_handoff.spec import Pipeline
from state_handoff.stream_control import StreamLock, stream_dir, write_json_atomically
from state_handoff.tables import Tables

EVENTS_SEEN = "stream_events"
SKIPPED_OVERLAP = "skipped_overlap"
HANDOFF_HEADER = "switchyard.handoff"
# Microseconds survive the round trip through the updates topic (Spark's JSON default keeps milliseconds).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


@dataclass
class StreamSettings:
    until_caught_up: bool = False
    for_seconds: float | None = None
    caught_up_lag: int = 0
    falling_behind_lag: int | None = None  # default: 10 x caught_up_lag, at least 1000
    max_offsets_per_trigger: int | None = 200_000
    trigger_seconds: float = 0.0
    # The Delta side (dead letters, late, windows, state from the updates topic) at most this often: fewer,
    # larger Delta commits leave the cores to the update path; a backlog still runs batches back to back.
    tables_trigger_seconds: float = 5.0
    poll_seconds: float = 0.5

    @property
    def behind_threshold(self) -> int:
        return self.falling_behind_lag if self.falling_behind_lag is not None else max(10 * self.caught_up_lag, 1000)


@dataclass
class StreamPaths:
    """The handoff's stream folder: the seed's files, one checkpoint per query, and caches for `status`."""

    root: Path

    @property
    def seed(self) -> Path:
        return self.root / "seed"

    @property
    def seed_written(self) -> Path:
        """Spark's job commit writes `_SUCCESS` last: present means every seed file is in place."""
        return self.root / "seed" / "_SUCCESS"

    @property
    def keyed_checkpoint(self) -> Path:
        return self.root / "checkpoints" / "keyed"

    @property
    def events_checkpoint(self) -> Path:
        return self.root / "checkpoints" / "events"

    @property
    def state_checkpoint(self) -> Path:
        return self.root / "checkpoints" / "state"

    @property
    def checkpoints(self) -> dict[str, Path]:
        return {KEYED: self.keyed_checkpoint, stream_progress.EVENTS: self.events_checkpoint,
                stream_progress.STATE: self.state_checkpoint}

    @property
    def progress(self) -> Path:
        return self.root / "progress.json"


def checkpoint_incarnation(checkpoint: Path) -> str | None:
    """The query id Spark keeps in the checkpoint's `metadata`: the same across restarts from that checkpoint,
    new with a new one. None when the checkpoint has none yet."""
    try:
        return json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, IndexError, TypeError):
        raise UserError(f"the stream checkpoint's metadata file {checkpoint / 'metadata'} is corrupt: restore the "
                        "checkpoint from a backup, or start over with `switchyard backfill` and "
                        "`switchyard handoff`") from None


@dataclass
class StreamResult:
    handoff_id: str
    reason: str
    switched_after_s: float | None = None
    caught_up_after_s: float | None = None
    batches: int = 0
    lag: dict[int, int] = field(default_factory=dict)

    def summary(self, pipeline: str) -> str:
        parts = [f"stream {pipeline} {self.handoff_id} stopped ({self.reason})", f"{self.batches} event batches"]
        if self.switched_after_s is not None:
            parts.append(f"SWITCHED after {self.switched_after_s:.1f}s")
        if self.caught_up_after_s is not None:
            parts.append(f"CAUGHT_UP after {self.caught_up_after_s:.1f}s")
        parts.append(f"offsets behind: {sum(self.lag.values())}")
        return "; ".join(parts)


# ---------------------------------------------------------------- transforms (pure DataFrame -> DataFrame)

def kafka_records(spark: SparkSession, bootstrap: str, topic: str, start: dict[int, int],
                  settings: StreamSettings, with_key: bool = False) -> DataFrame:
    reader = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic)
              .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
              .option("failOnDataLoss", "true"))
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", settings.max_offsets_per_trigger)
    key = [F.col("key").alias("kafka_key")] if with_key else []
    return reader.load().select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                                F.col("timestamp").alias("kafka_timestamp"), *key, "value")


def mark_overlap(pipeline: Pipeline, parsed: DataFrame, archived: DataFrame, overlap: Overlap) -> DataFrame:
    """SKIPPED_OVERLAP: the record is in the overlap (Kafka timestamp at or before its end) and its identity is
    among the archived ones; a left join on the small static identity set, so the stream keeps every row."""
    identities = archived.select(F.col("identity").alias("__archived_identity")).distinct()
    in_overlap = F.col("kafka_timestamp") <= F.lit(overlap.until)
    return (parsed.withColumn("__identity", F.when(in_overlap, record_identity(pipeline)))
            .join(F.broadcast(identities), F.col("__identity") == F.col("__archived_identity"), "left")
            .withColumn(SKIPPED_OVERLAP, F.col("__archived_identity").isNotNull())
            .drop("__identity", "__archived_identity"))


def keyed_input(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed events as keyed partial rows, marked as stream input."""
    return parsed.where(F.col("error").isNull()).select(
        pipeline.key, *event_as_partial(pipeline, pipeline.aggregations, keyed=True),
        F.lit(1).cast("long").alias(EVENTS_SEEN))


def merged_state(pipeline: Pipeline, partials: DataFrame) -> DataFrame:
    """The running keyed state over seed and event partials; EVENTS_SEEN tells seed-only keys apart."""
    return (partials.groupBy(pipeline.key)
            .agg(*merge_aggregations(pipeline.aggregations, keyed=True), F.sum(EVENTS_SEEN).alias(EVENTS_SEEN))
            .select(pipeline.key, *flatten_last(pipeline.aggregations, keyed=True), EVENTS_SEEN))


def window_end(pipeline: Pipeline) -> F.Column:
    return F.col("window_start") + F.expr(f"INTERVAL {int(pipeline.windows.size.total_seconds())} SECONDS")


def batch_window_partials(pipeline: Pipeline, on_time: DataFrame) -> DataFrame:
    aggs = pipeline.windows.aggregations
    return (on_time.groupBy(pipeline.key, "window_start").agg(*event_aggregations(pipeline, aggs))
            .select(pipeline.key, "window_start", window_end(pipeline).alias("window_end"), *flatten_last(aggs)))


# ---------------------------------------------------------------- batch sinks

class _Txn:
    """Delta idempotent writes: MERGE reads (txnAppId, txnVersion) from the session, not from writer options."""

    def __init__(self, spark: SparkSession, app_id: str, version: int):
        self.spark, self.app_id, self.version = spark, app_id, version

    def __enter__(self):
        self.spark.conf.set(_TXN_APP, self.app_id)
        self.spark.conf.set(_TXN_VERSION, str(self.version))

    def __exit__(self, *exc):
        self.spark.conf.unset(_TXN_APP)
        self.spark.conf.unset(_TXN_VERSION)


def _append(df: DataFrame, path: str, app_id: str, batch_id: int, partition_by: str | None = None) -> None:
    writer = df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id)
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.save(path)


def update_messages(pipeline: Pipeline, changed: DataFrame, handoff_id: str) -> DataFrame:
    """Changed keys as `<pipeline>.updates` records: key, the whole state as JSON, the handoff as a header."""
    return changed.select(
        F.col(pipeline.key).cast("binary").alias("key"),
        F.to_json(F.struct(*[F.col(c) for c in changed.columns]), JSON_OPTIONS).cast("binary").alias("value"),
        F.array(F.struct(F.lit(HANDOFF_HEADER).alias("key"), F.lit(handoff_id).cast("binary").alias("value")))
        .alias("headers"))


def newest_updates(pipeline: Pipeline, messages: DataFrame, schema, handoff_id: str) -> DataFrame:
    """This handoff's update records, newest per key (a key's updates share a partition), as state rows."""
    ours = F.exists("headers", lambda h: (h["key"] == HANDOFF_HEADER) & (h["value"] == F.lit(handoff_id).cast("binary")))
    rows = messages.where(ours).select("offset", F.from_json(F.col("value").cast("string"), schema, JSON_OPTIONS)
                                       .alias("s"))
    return (rows.groupBy(F.col(f"s.`{pipeline.key}`").alias("__key")).agg(F.max_by("s", "offset").alias("s"))
            .select("s.*"))


class _TxnApp:
    """A query's Delta transaction app id: the handoff and the incarnation of the query's checkpoint (which
    Spark writes as the query starts, before its first batch), so a fresh checkpoint's batch ids can never
    be mistaken for an old one's."""

    def __init__(self, base: str, checkpoint: Path):
        self.base, self.checkpoint, self.incarnation = base, checkpoint, None

    def __str__(self) -> str:
        if self.incarnation is None:
            self.incarnation = checkpoint_incarnation(self.checkpoint)
            if self.incarnation is None:
                raise RuntimeError(f"the stream checkpoint {self.checkpoint} has no metadata file")
        return f"{self.base}-{self.incarnation}"


class KeyedSink:
    def __init__(self, pipeline: Pipeline, bootstrap: str, handoff_id: str):
        self.pipeline, self.bootstrap, self.handoff_id = pipeline, bootstrap, handoff_id

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        # Replays may resend: an update is the key's whole state, so a second copy changes nothing.
        changed = batch.where(F.col(EVENTS_SEEN) > 0).drop(EVENTS_SEEN)
        (update_messages(self.pipeline, changed, self.handoff_id)
         .write.format("kafka").option("kafka.bootstrap.servers", self.bootstrap)
         .option("topic", self.pipeline.updates_topic).save())
        faults.reach("stream.keyed.after_send")


class StateSink:
    """Upserts the updates of a batch into `state`, once per batch id."""

    def __init__(self, pipeline: Pipeline, tables: Tables, schema, handoff_id: str, app: _TxnApp):
        self.pipeline, self.tables, self.schema, self.handoff_id, self.app = (
            pipeline, tables, schema, handoff_id, app)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        from delta.tables import DeltaTable

        if batch.isEmpty():  # a Delta MERGE of nothing still costs a snapshot, a join and a commit
            return
        started = datetime.now(timezone.utc)
        key = self.pipeline.key
        newest = newest_updates(self.pipeline, batch, self.schema, self.handoff_id)
        with _Txn(batch.sparkSession, str(self.app), batch_id):
            (DeltaTable.forPath(batch.sparkSession, self.tables.state).alias("t")
             .merge(newest.alias("s"), f"t.`{key}` = s.`{key}`")
             .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
        faults.reach("stream.state.after_merge")
        stream_progress.record(self.tables, stream_progress.BatchRow(
            self.handoff_id, stream_progress.STATE, self.app.incarnation, batch_id, None, None, {}, started,
            datetime.now(timezone.utc)))


class EventsSink:
    def __init__(self, pipeline: Pipeline, tables: Tables, handoff: Handoff, app: _TxnApp):
        self.pipeline, self.tables, self.handoff, self.app = pipeline, tables, handoff, app
        self.last: stream_progress.BatchRow | None = None  # the newest batch this process recorded

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

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        started = datetime.now(timezone.utc)
        pipeline, tables, app = self.pipeline, self.tables, str(self.app)
        watermark = self.watermark_before(batch_id)
        batch = batch.persist()
        try:
            skipping = SKIPPED_OVERLAP in batch.columns
            kept = ~F.col(SKIPPED_OVERLAP) if skipping else F.lit(True)
            well = F.col("error").isNull() & kept
            malformed = F.col("error").isNotNull() & kept
            windows = pipeline.windows is not None
            events = batch.withColumn("window_start", tile_start(pipeline) if windows else F.lit(None).cast("timestamp"))
            is_late = well & (window_end(pipeline) <= F.lit(watermark)) if windows and watermark else F.lit(False)
            events = events.withColumn("__late", is_late)
            stats = events.groupBy("kafka_partition").agg(
                F.count(F.lit(1)).alias("read"), F.count_if(well).alias("well_formed"),
                F.count_if(malformed).alias("dead_lettered"), F.count_if(F.col("__late")).alias("late"),
                F.count_if(~kept).alias(SKIPPED_OVERLAP),
                F.max("kafka_offset").alias("last_offset"),
                F.max(F.when(well, F.col(pipeline.event_time))).alias("newest")).collect()
            per_partition = {int(r.kafka_partition): {"read": r.read, "well_formed": r.well_formed,
                                                      "dead_lettered": r.dead_lettered, "late": r.late,
                                                      "last_offset": r.last_offset} for r in stats}
            if skipping:
                for r in stats:
                    per_partition[int(r.kafka_partition)][SKIPPED_OVERLAP] = r[SKIPPED_OVERLAP]
            newest = max((r.newest for r in stats if r.newest is not None), default=None)
            if any(p["dead_lettered"] for p in per_partition.values()):
                dead = events.where(malformed).select(
                    "kafka_partition", "kafka_offset", "value", F.col("error").alias("reason"),
                    F.lit("stream").alias("phase"), F.current_timestamp().alias("recorded_at"),
                    F.coalesce(F.to_date(pipeline.event_time), F.to_date("kafka_timestamp")).alias("event_date"))
                _append(dead, tables.dead_letter, f"{app}-dead", batch_id, "event_date")
                faults.reach("stream.events.after_dead_letter")
            if any(p["late"] for p in per_partition.values()):
                late = events.where("__late").select(
                    "kafka_partition", "kafka_offset", pipeline.key, pipeline.event_time, "window_start",
                    F.lit(watermark).alias("watermark"), "value", F.current_timestamp().alias("recorded_at"))
                _append(late, tables.late, f"{app}-late", batch_id)
            watermark_after = watermark
            if windows:
                on_time = events.where(well & ~F.col("__late"))
                if any(p["well_formed"] - p["late"] for p in per_partition.values()):
                    self._merge_windows(batch.sparkSession, batch_window_partials(pipeline, on_time), batch_id)
                    faults.reach("stream.events.after_window_merge")
                if newest is not None:
                    candidate = newest - pipeline.allowed_lateness
                    watermark_after = max(watermark, candidate) if watermark else candidate
                if watermark_after and (watermark is None or _window_index(pipeline, watermark_after)
                                        > _window_index(pipeline, watermark)):
                    self._finalize_windows(batch.sparkSession, watermark_after, batch_id)
        finally:
            batch.unpersist()
        row = stream_progress.BatchRow(self.handoff.handoff_id, stream_progress.EVENTS, self.app.incarnation,
                                       batch_id, watermark, watermark_after,
                                       {str(p): counts for p, counts in per_partition.items()}, started,
                                       datetime.now(timezone.utc))
        stream_progress.record(tables, row)
        self.last = row
        faults.reach("stream.events.after_progress")

    def _merge_windows(self, spark: SparkSession, partials: DataFrame, batch_id: int) -> None:
        from delta.tables import DeltaTable

        key = self.pipeline.key
        with _Txn(spark, f"{self.app}-windows-merge", batch_id):
            (DeltaTable.forPath(spark, self.tables.window_state).alias("t")
             .merge(partials.alias("s"), f"t.`{key}` = s.`{key}` AND t.window_start = s.window_start")
             .whenMatchedUpdate(set=merge_into(self.pipeline.windows.aggregations))
             .whenNotMatchedInsertAll().execute())

    def _finalize_windows(self, spark: SparkSession, watermark: datetime, batch_id: int) -> None:
        from delta.tables import DeltaTable

        closing = F.col("window_end") <= F.lit(watermark)
        final = spark.read.format("delta").load(self.tables.window_state).where(closing)
        _append(final, self.tables.windows, f"{self.app}-windows-final", batch_id)
        faults.reach("stream.events.after_finalize_append")
        with _Txn(spark, f"{self.app}-windows-close", batch_id):
            DeltaTable.forPath(spark, self.tables.window_state).delete(closing)


def _window_index(pipeline: Pipeline, t: datetime) -> int:
    return int(t.timestamp() // pipeline.windows.size.total_seconds())


# ---------------------------------------------------------------- the job

KEYED = "keyed"


def _write_seed(spark: SparkSession, pipeline: Pipeline, tables: Tables, handoff: Handoff, paths: StreamPaths) -> None:
    """The state at the handoff's version, once, as the seed source's files."""
    if paths.seed_written.exists():
        return
    if paths.keyed_checkpoint.exists():
        raise UserError(f"the seed of handoff {handoff.handoff_id} ({paths.seed}) is gone but its stream checkpoint "
                        "refers to it: restore the folder from a backup, or start over with `switchyard backfill` "
                        "and `switchyard handoff`")
    state = spark.read.format("delta").option("versionAsOf", handoff.state_version).load(tables.state)
    state.select(pipeline.key, *partial_columns(pipeline.aggregations, keyed=True),
                 F.lit(0).cast("long").alias(EVENTS_SEEN)).write.mode("overwrite").parquet(str(paths.seed))
    faults.reach("stream.after_seed")


def check_resumable(tables: Tables, handoff: Handoff, paths: StreamPaths, entries: list) -> None:
    """Refuse a checkpoint that is not the one whose writes Delta holds for this handoff: a lost or replaced
    checkpoint restarts batch ids, and replaying the handoff from its start would apply records twice."""
    recorded = stream_progress.incarnations(tables, handoff.handoff_id)
    switched = [e for e in entries if e.handoff_id == handoff.handoff_id and e.status == handoff_log.SWITCHED]
    if switched:  # the keyed query writes no Delta table; its first committed batch is in the log
        recorded[KEYED] = {handoff_log.details(e).get("keyed_incarnation") for e in switched}
    for query, incarnations in recorded.items():
        current = checkpoint_incarnation(paths.checkpoints[query])
        if current not in incarnations:
            state = "missing" if current is None else f"a new one ({current[:8]})"
            raise UserError(
                f"the {query} checkpoint of handoff {handoff.handoff_id} ({paths.checkpoints[query]}) is {state}, but "
                f"Delta already holds that handoff's stream writes: a stream cannot resume without the checkpoint "
                "that made them; restore it, or start over with `switchyard backfill` and `switchyard handoff`")


def _ensure_tables(spark: SparkSession, pipeline: Pipeline, tables: Tables) -> None:
    """Tables the stream appends to but the backfill may not have made (no malformed or late records yet)."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, tables.dead_letter):
        spark.createDataFrame([], "kafka_partition INT, kafka_offset BIGINT, value BINARY, reason STRING, "
                                  "phase STRING, recorded_at TIMESTAMP, event_date DATE") \
            .write.format("delta").partitionBy("event_date").save(tables.dead_letter)
    if not DeltaTable.isDeltaTable(spark, tables.late):
        spark.createDataFrame([], f"kafka_partition INT, kafka_offset BIGINT, `{pipeline.key}` STRING, "
                                  f"`{pipeline.event_time}` TIMESTAMP, window_start TIMESTAMP, watermark TIMESTAMP, "
                                  "value BINARY, recorded_at TIMESTAMP") \
            .write.format("delta").save(tables.late)


def _updates_start(bootstrap: str, pipeline: Pipeline, handoff: Handoff, paths: StreamPaths,
                   entries: list) -> dict[str, int]:
    """Where this handoff's updates begin on `<pipeline>.updates`: the topic's end when its stream first started,
    kept in the log's STREAM_STARTED entry before any update is sent."""
    for entry in entries:
        if entry.handoff_id == handoff.handoff_id and entry.status == handoff_log.STREAM_STARTED:
            recorded = handoff_log.details(entry).get("updates_from")
            if recorded is not None:
                return recorded
    if paths.keyed_checkpoint.exists():
        raise UserError(f"the stream of handoff {handoff.handoff_id} has a checkpoint ({paths.keyed_checkpoint}) but "
                        f"the handoff log ({paths.root.parent.parent / 'handoffs'}) records no start of its updates: "
                        "restore the log, or start over with `switchyard backfill` and `switchyard handoff`")
    ends = latest_offsets(bootstrap, [pipeline.updates_topic])[pipeline.updates_topic]
    return {str(p): hi for p, hi in ends.items()}


def _kafka_end_offsets(query, topic: str) -> dict[int, int] | None:
    progress = query.lastProgress
    if not progress:
        return None
    for source in progress["sources"]:
        if source["description"].startswith("KafkaV2"):
            end = source["endOffset"]
            end = json.loads(end) if isinstance(end, str) else end
            return {int(p): int(o) for p, o in (end or {}).get(topic, {}).items()}
    return None


def run_stream(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str,
               settings: StreamSettings | None = None, out=print) -> StreamResult:
    settings = settings or StreamSettings()
    handoff = current_handoff(spark, tables)
    if handoff is None:
        raise UserError(f"pipeline {pipeline.name} has no committed handoff: run `switchyard handoff` first")
    lock = StreamLock(tables).acquire()
    try:
        return _run(spark, pipeline, tables, bootstrap, settings, handoff, out)
    finally:
        lock.release()


def _run(spark, pipeline, tables, bootstrap, settings, handoff, out) -> StreamResult:
    paths = StreamPaths(stream_dir(tables, handoff.handoff_id))
    entries = handoff_log.entries(None, tables)
    check_resumable(tables, handoff, paths, entries)
    restart = paths.keyed_checkpoint.exists()
    started = time.monotonic()
    _write_seed(spark, pipeline, tables, handoff, paths)
    _ensure_tables(spark, pipeline, tables)
    create_topic(bootstrap, pipeline.updates_topic, partitions=max(1, len(handoff.start_offsets)), exist_ok=True,
                 compacted=True)
    updates_from = _updates_start(bootstrap, pipeline, handoff, paths, entries)
    handoff_log.append(spark, tables, handoff.handoff_id, handoff_log.STREAM_STARTED,
                       start_offsets=handoff.start_offsets, backlog_watermark=handoff.backlog_watermark,
                       details={"pid": os.getpid(), "restart": restart, "topic": handoff.topic,
                                "updates_from": updates_from})
    out(f"stream {pipeline.name}: handoff {handoff.handoff_id}, {'resuming from checkpoint' if restart else 'seeding'}"
        f" from state version {handoff.state_version}")

    parsed = parse_events(pipeline, kafka_records(spark, bootstrap, handoff.topic, handoff.start_offsets, settings,
                                                  with_key=handoff.overlap is not None))
    keyed_source = parsed
    if handoff.overlap is not None:
        parsed = mark_overlap(pipeline, parsed, spark.read.parquet(handoff.overlap.path), handoff.overlap)
        keyed_source = parsed.where(~F.col(SKIPPED_OVERLAP))
    seed = spark.readStream.schema(spark.read.parquet(str(paths.seed)).schema).parquet(str(paths.seed))
    # Small micro-batches on few cores: one state-store partition per core (fixed by the first checkpoint),
    # RocksDB changelog commits instead of full snapshots each batch.
    spark.conf.set("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    app_id = f"switchyard-{pipeline.name}-{handoff.handoff_id}"
    trigger = {"processingTime": f"{settings.trigger_seconds} seconds"}
    tables_trigger = {"processingTime": f"{max(settings.trigger_seconds, settings.tables_trigger_seconds)} seconds"}
    context = spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", "keyed")  # inherited by the queries' threads
    keyed = (merged_state(pipeline, keyed_input(pipeline, keyed_source).unionByName(seed))
             .writeStream.queryName(f"{pipeline.name}-keyed").outputMode("update")
             .foreachBatch(KeyedSink(pipeline, bootstrap, handoff.handoff_id))
             .option("checkpointLocation", str(paths.keyed_checkpoint)).trigger(**trigger).start())
    context.setLocalProperty("spark.scheduler.pool", "events")
    events_sink = EventsSink(pipeline, tables, handoff, _TxnApp(f"{app_id}-events", paths.events_checkpoint))
    events = (parsed.writeStream.queryName(f"{pipeline.name}-events").foreachBatch(events_sink)
              .option("checkpointLocation", str(paths.events_checkpoint)).trigger(**tables_trigger).start())
    # The updates topic is compacted: Kafka may drop a key's older updates, which only the newest matters for.
    updates = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", pipeline.updates_topic).option("includeHeaders", "true")
               .option("startingOffsets", json.dumps({pipeline.updates_topic: updates_from}))
               .option("failOnDataLoss", "false").load())
    state_schema = spark.read.format("delta").load(tables.state).schema
    context.setLocalProperty("spark.scheduler.pool", "state")
    state = (updates.writeStream.queryName(f"{pipeline.name}-state")
             .foreachBatch(StateSink(pipeline, tables, state_schema, handoff.handoff_id,
                                     _TxnApp(f"{app_id}-state", paths.state_checkpoint)))
             .option("checkpointLocation", str(paths.state_checkpoint)).trigger(**tables_trigger).start())
    context.setLocalProperty("spark.scheduler.pool", None)
    monitor = _Monitor(spark, pipeline, tables, bootstrap, settings, handoff, paths, (keyed, events, state),
                       events_sink, updates_from, started, out)
    return monitor.run()


class _Monitor:
    """Watches the three queries and the input's lag, logs the transitions, stops on a signal or a condition.

    Only a failed query stops the stream (FAILED, exit 1). The monitor's own I/O (Kafka offsets, the progress
    cache) fails soft: retried with backoff while the lag is reported as unknown."""

    def __init__(self, spark, pipeline, tables, bootstrap, settings, handoff, paths, queries, events_sink,
                 updates_from, started, out):
        self.spark, self.pipeline, self.tables, self.bootstrap = spark, pipeline, tables, bootstrap
        self.settings, self.handoff, self.paths, self.queries = settings, handoff, paths, queries
        self.events_sink, self.started, self.out = events_sink, started, out
        self.updates_from = {int(p): int(o) for p, o in updates_from.items()}
        self.result = StreamResult(handoff.handoff_id, reason="")
        self.lag_error: str | None = None
        self.lag_unknown_since: float | None = None
        self.next_lag_at = 0.0
        self.backoff = settings.poll_seconds

    def log(self, status: str, **fields) -> None:
        handoff_log.append(self.spark, self.tables, self.handoff.handoff_id, status, **fields)

    def run(self) -> StreamResult:
        stop_signal: list[str] = []
        previous = {sig: signal.signal(sig, lambda s, _f: stop_signal.append(signal.Signals(s).name))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        settings, result, handoff = self.settings, self.result, self.handoff
        log_statuses = {e.status for e in handoff_log.entries(None, self.tables)
                        if e.handoff_id == handoff.handoff_id}
        switched = handoff_log.SWITCHED in log_statuses
        caught_up = False
        lag, snapshot = {}, {}
        try:
            while True:
                self._raise_if_a_query_failed()
                if not switched and (self.paths.keyed_checkpoint / "commits" / "0").exists():
                    switched = True
                    result.switched_after_s = time.monotonic() - self.started
                    self.log(handoff_log.SWITCHED, start_offsets=handoff.start_offsets,
                             backlog_watermark=handoff.backlog_watermark,
                             details={"seconds_since_start": round(result.switched_after_s, 3),
                                      "keyed_incarnation": checkpoint_incarnation(self.paths.keyed_checkpoint)})
                    self.out(f"SWITCHED after {result.switched_after_s:.1f}s: the first batch with the seed has "
                             "committed")
                if time.monotonic() >= self.next_lag_at:
                    measured = self._measure_lag()
                    if measured is not None:
                        lag, snapshot = measured
                        result.lag = lag
                known = self.lag_error is None
                behind = sum(lag.values())
                state_current = snapshot.get("state_updates_behind", 0) <= settings.caught_up_lag
                if known and switched and not caught_up and behind <= settings.caught_up_lag and state_current:
                    caught_up = True
                    result.caught_up_after_s = result.caught_up_after_s or time.monotonic() - self.started
                    self.log(handoff_log.CAUGHT_UP, details={"offsets_behind": lag, **snapshot})
                    self.out(f"CAUGHT_UP after {time.monotonic() - self.started:.1f}s: {behind} offsets behind latest")
                elif known and caught_up and behind > settings.behind_threshold:
                    caught_up = False
                    self.log(handoff_log.FALLING_BEHIND, details={"offsets_behind": lag, **snapshot})
                    self.out(f"FALLING_BEHIND: {behind} offsets behind latest")
                self._write_progress(lag if known else None, snapshot)
                if stop_signal:
                    result.reason = stop_signal[0]
                    break
                if settings.until_caught_up and caught_up:
                    result.reason = "caught up"
                    break
                if settings.for_seconds is not None and time.monotonic() - self.started >= settings.for_seconds:
                    result.reason = f"ran {settings.for_seconds:g}s"
                    break
                time.sleep(settings.poll_seconds)
        except Exception as err:
            _stop(self.queries)
            self.log(handoff_log.FAILED, details={"phase": "stream", "reason": _first_line(err)})
            if isinstance(err, StreamFailed):
                raise
            raise StreamFailed(f"the stream's monitor failed: {_first_line(err)}") from err
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        _keep_recent_progress(self.queries, self.paths)
        try:
            _stop_draining_state(self.queries)
        except Exception as err:
            reason = f"applying the last updates to state: {str(err).splitlines()[0][:400]}"
            self.log(handoff_log.FAILED, details={"phase": "stream", "reason": reason})
            raise StreamFailed(reason) from None
        result.batches = len(stream_progress.batches(self.tables, handoff.handoff_id))
        self.log(handoff_log.STOPPED, details={"reason": result.reason, "offsets_behind": result.lag})
        return result

    def _raise_if_a_query_failed(self) -> None:
        for query in self.queries:
            if query.exception() is not None:
                raise StreamFailed(f"query {query.name} failed: {_query_error(query.exception())}")
            if not query.isActive:
                raise StreamFailed(f"query {query.name} stopped unexpectedly")

    def _measure_lag(self) -> tuple[dict[int, int], dict] | None:
        try:
            measured = _lag(self.bootstrap, self.pipeline, self.handoff, self.queries, self.events_sink,
                            self.updates_from)
        except Exception as err:  # a broker restarting, a network blip: the queries ride it out or fail themselves
            now = time.monotonic()
            if self.lag_error is None:
                self.lag_unknown_since = time.time()
                self.out(f"lag unknown: {_first_line(err)}; retrying with backoff")
            self.lag_error = _first_line(err)
            self.next_lag_at = now + self.backoff
            self.backoff = min(self.backoff * 2, 30.0)
            return None
        if self.lag_error is not None:
            self.out(f"lag known again after {time.time() - self.lag_unknown_since:.0f}s")
        self.lag_error, self.lag_unknown_since, self.backoff = None, None, self.settings.poll_seconds
        return measured

    def _write_progress(self, lag: dict[int, int] | None, snapshot: dict) -> None:
        try:
            write_json_atomically(self.paths.progress, {
                "pid": os.getpid(), "updated": time.time(), "handoff_id": self.handoff.handoff_id,
                **snapshot, "offsets_behind": lag, "lag_error": self.lag_error,
                "lag_unknown_since": self.lag_unknown_since})
        except OSError as err:  # a cache for status: the stream goes on without it
            self.lag_error = self.lag_error or f"progress file not written: {_first_line(err)}"


class StreamFailed(Failed):
    """A query of the stream failed, or the monitor could not go on: FAILED is in the log."""


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _query_error(err) -> str:
    """The cause, when a foreachBatch function raised it: the last `SomeError: message` line of the Python
    traceback Spark wraps; else the exception's first line."""
    causes = [line.strip() for line in str(err).splitlines()
              if re.match(r"^\s*[A-Za-z_.]*(Error|Exception|Failed): ", line)]
    return causes[-1][:300] if causes else _first_line(err)


def _keep_recent_progress(queries, paths: StreamPaths) -> None:
    """Each query's last batches (rows, per-phase durations) beside the checkpoints, for where the time goes."""
    history = {q.name: [{"batch_id": p["batchId"], "rows": p["numInputRows"], "duration_ms": p["durationMs"]}
                        for p in q.recentProgress] for q in queries}
    try:
        write_json_atomically(paths.root / "recent_progress.json", history)
    except OSError:
        pass


def _stop_draining_state(queries) -> None:
    """Stop reading input, then let the state query apply every update already sent, then stop it."""
    *readers, state = queries
    _stop(readers)
    state.processAllAvailable()
    state.stop()


def _stop(queries) -> None:
    for query in queries:
        try:
            query.stop()
        except Exception:  # already failed; its error is what gets reported
            pass


def _lag(bootstrap: str, pipeline: Pipeline, handoff: Handoff, queries, events_sink: EventsSink,
         updates_from: dict[int, int]) -> tuple[dict[int, int], dict]:
    """Input offsets behind latest per partition, for the slower of the two readers, plus figures for status:
    among them the updates the state query has yet to apply."""
    keyed, events, state = queries
    newest = latest_offsets(bootstrap, [handoff.topic, pipeline.updates_topic])
    latest, updates_latest = newest[handoff.topic], newest[pipeline.updates_topic]
    done = dict(handoff.start_offsets)
    committed = []
    for query in (keyed, events):
        ends = _kafka_end_offsets(query, handoff.topic)
        committed.append(ends if ends is not None else {})
    lag = {}
    for p, hi in latest.items():
        position = min(c.get(p, done.get(p, 0)) for c in committed)
        lag[p] = max(0, hi - position)
    progress = events.lastProgress or {}
    applied = _kafka_end_offsets(state, pipeline.updates_topic) or updates_from
    state_behind = sum(max(0, hi - applied.get(p, 0)) for p, hi in updates_latest.items())
    last = events_sink.last
    return lag, {
        "latest_offsets": latest,
        "input_rows_per_s": progress.get("inputRowsPerSecond"),
        "processed_rows_per_s": progress.get("processedRowsPerSecond"),
        "last_batch_ms": (progress.get("durationMs") or {}).get("triggerExecution"),
        "stream_watermark": last.watermark_after.isoformat() if last and last.watermark_after else None,
        "batch_id": progress.get("batchId"),
        "update_batch_ms": ((keyed.lastProgress or {}).get("durationMs") or {}).get("triggerExecution"),
        "state_updates_behind": state_behind,
    }
