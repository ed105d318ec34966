"""The state query: reads this handoff's updates back from the updates topic (jobs/stream/updates_topic.py) and
upserts the newest per key into `state`, only ever forward: an update replaces a row only when its UPDATE_VERSION
is newer. An update is the key's whole state, so applying one twice (a replayed keyed batch resends it) or late
changes nothing; a stop drains it, so `state` holds every update when the stream stops."""

from __future__ import annotations

import json
import threading
import time
from datetime import datetime, timezone

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from switchyard.jobs.delta_txn import TxnApp, keys_equal, merge_once
from switchyard.jobs.seed import UPDATE_VERSION
from switchyard.jobs.stream.queries import kafka_end_offsets, last_progress
from switchyard.jobs.stream.updates_topic import check_input_topic
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, kept_versions
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep, storage
from switchyard.state_handoff.io.kafka_io import latest_offsets
from switchyard.state_handoff.io.kafka_security import spark_source_options
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.stream.update_records import HANDOFF_HEADER, JSON_OPTIONS
from switchyard.state_handoff.tables import Tables


def newest_updates(pipeline: Pipeline, messages: DataFrame, schema, handoff_id: str) -> DataFrame:
    """This handoff's update records, newest per key, as state rows: the greatest UPDATE_VERSION (then offset, for
    a table without versions), whatever order they arrived in."""
    ours = F.exists("headers", lambda h: (h["key"] == HANDOFF_HEADER) & (h["value"] == F.lit(handoff_id).cast("binary")))
    rows = messages.where(ours).select("offset", F.from_json(F.col("value").cast("string"), schema, JSON_OPTIONS)
                                       .alias("s"))
    order = (F.struct(F.col(f"s.{UPDATE_VERSION}"), F.col("offset")) if UPDATE_VERSION in schema.fieldNames()
             else F.col("offset"))
    keys = [F.col(f"s.`{k}`").alias(f"__key{i}") for i, k in enumerate(pipeline.keys)]
    return rows.groupBy(*keys).agg(F.max_by("s", order).alias("s")).select("s.*")


def forward_only(schema) -> str | None:
    """The MERGE's condition for replacing a row: a newer UPDATE_VERSION (None for a table made before versions,
    whose rows any update replaces)."""
    if UPDATE_VERSION not in schema.fieldNames():
        return None
    return f't."{UPDATE_VERSION}" IS NULL OR s."{UPDATE_VERSION}" > t."{UPDATE_VERSION}"'


class StateTurn:
    """The state query's batches do their work half a trigger interval after the events query's. Spark starts
    processing-time triggers at multiples of the interval since the epoch, so the two Delta-writing queries
    otherwise read and reduce their batches at the same moments, and the keyed batches beside them would meet
    both at once: taking turns keeps the update latency down. A drain (`hurry`) cuts the wait short: a stop or a
    pause never waits for a turn."""

    def __init__(self, interval_s: float):
        self.interval_s, self.hurry = interval_s, threading.Event()
        self.done_at: float | None = None  # when the previous batch ended

    def wait(self) -> None:
        now = time.time()
        if self.done_at is not None and now - self.done_at < 0.25:
            return  # started as the previous batch ended: the query is behind, not on the clock
        turn = now // self.interval_s * self.interval_s + self.interval_s / 2
        if turn > now:
            self.hurry.wait(turn - now)

    def done(self) -> None:
        self.done_at = time.time()


class StateSink:
    """Upserts the updates of a batch into `state`, once per batch id: the newest update per key, collected
    (at most one row per key) and merged by delta-rs. A Spark MERGE of a few thousand rows costs seconds of the
    cores on a running stream (its plans, jobs and the JIT compiling them), taken from the keyed path."""

    def __init__(self, pipeline: Pipeline, tables: Tables, schema, handoff_id: str, app: TxnApp,
                 turn: StateTurn | None = None):
        self.pipeline, self.tables, self.schema, self.handoff_id, self.app, self.turn = (
            pipeline, tables, schema, handoff_id, app, turn)
        self.table = None  # the deltalake DeltaTable of `state`, loaded once

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        if self.turn is not None:
            self.turn.wait()
        try:
            self._apply(batch, batch_id)
        finally:
            if self.turn is not None:
                self.turn.done()

    def _apply(self, batch: DataFrame, batch_id: int) -> None:
        from deltalake import DeltaTable

        started = datetime.now(timezone.utc)
        newest = newest_updates(self.pipeline, batch, self.schema, self.handoff_id).toArrow()
        if newest.num_rows == 0:
            return
        if self.table is None:
            self.table = DeltaTable(self.tables.state, storage_options=storage.delta_options(self.tables.state))
        merge_once(self.table, newest, keys_equal(self.pipeline.keys), str(self.app), batch_id,
                   matched_when=forward_only(self.schema))
        faults.reach("stream.state.after_merge")
        stream_progress.record(self.tables, stream_progress.BatchRow(
            self.handoff_id, stream_progress.STATE, self.app.incarnation, batch_id, None, None, {}, started,
            datetime.now(timezone.utc)))
        if delta_upkeep.due(batch_id):
            delta_upkeep.tidy(self.table, keep_versions=kept_versions.kept_state_versions(PipelineView.read(self.tables)))


def updates_start(bootstrap: str, pipeline: Pipeline, handoff: Handoff, updates_topic: str, paths: StreamPaths,
                  entries: list) -> dict[str, int]:
    """Where this handoff's updates begin on `updates_topic`: the topic's end when its stream first started,
    kept in the log's STREAM_STARTED entry before any update is sent. Refused when the input topic is an updates
    topic."""
    check_input_topic(bootstrap, pipeline, handoff.topic)
    for entry in entries:
        if entry.handoff_id == handoff.handoff_id and entry.status == Status.STREAM_STARTED:
            recorded = details.of(entry).updates_from
            if recorded is not None:
                return recorded
    if storage.exists(paths.keyed_checkpoint):
        raise UserError(f"the stream of handoff {handoff.handoff_id} has a checkpoint ({paths.keyed_checkpoint}) but "
                        f"the handoff log ({paths.root.rsplit('/', 2)[0]}/handoffs) records no start of its updates: "
                        "restore the log, or start over with `switchyard backfill` and `switchyard handoff`")
    ends = latest_offsets(bootstrap, [updates_topic])[updates_topic]
    return {str(p): hi for p, hi in ends.items()}


def start_state_query(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, handoff_id: str,
                      updates_topic: str, updates_from: dict[str, int], paths: StreamPaths, app: TxnApp,
                      turn: StateTurn, trigger: dict) -> StreamingQuery:
    """The state query over `updates_topic` from `updates_from`, in the `state` scheduler pool. The topic is
    compacted: Kafka may drop a key's older updates, which only the newest matters for."""
    updates = (spark.readStream.format("kafka").options(**spark_source_options(bootstrap))
               .option("subscribe", updates_topic).option("includeHeaders", "true")
               .option("startingOffsets", json.dumps({updates_topic: updates_from}))
               .option("failOnDataLoss", "false").load())
    state_schema = spark.read.format("delta").load(tables.state).schema
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", "state")
    query = (updates.writeStream.queryName(f"{pipeline.name}-state")
             .foreachBatch(StateSink(pipeline, tables, state_schema, handoff_id, app, turn))
             .option("checkpointLocation", str(paths.state_checkpoint))
             .trigger(**trigger).start())
    spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
    return query


def applied_every_update(state: StreamingQuery, bootstrap: str, topic: str, updates_from: dict[int, int]) -> bool:
    """The state query's last batch ended at the updates topic's end (the readers stopped, so nothing more comes),
    or, before its first batch in this process, no update was sent since the handoff's updates began
    (`updates_from`): a drain has nothing to wait for. Unsure (Kafka unreachable): False.

    Without the second case, a stream stopped soon after its start (at CAUGHT_UP, a short `--until-caught-up`) would
    wait out the state query's first, cold batch over nothing."""
    try:
        applied = kafka_end_offsets(last_progress(state), topic)
        ends = latest_offsets(bootstrap, [topic])[topic]
    except Exception:
        return False
    if applied is None:  # no batch yet: what it applied before this process is unknown, but not below the start
        if state.exception() is not None:
            return False  # a failed query: the wait reports its error
        applied = updates_from
    return all(applied.get(p, 0) >= hi for p, hi in ends.items())
