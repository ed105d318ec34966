"""The keyed query: the seed (the state at the handoff's version, as a file stream source; jobs/seed.py) unioned
with the parsed events, merged by one streaming aggregation on the RocksDB state store. Each batch sends the
changed keys' whole new state to the updates topic through Spark's own Kafka sink and does nothing else: no
Delta write and no Python step sits between an input record and its update. The seed's files are recorded in the
checkpoint, so a restart never seeds again."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from switchyard.jobs.seed import EVENTS_SEEN, UPDATE_VERSION, seed_schema
from switchyard.state_handoff import faults
from switchyard.state_handoff.io.kafka_security import spark_options
from switchyard.state_handoff.language.aggregates import event_as_partial, flatten_last, merge_aggregations
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.stream.update_records import JSON_OPTIONS, handoff_headers, update_key


def keyed_input(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Well-formed events as keyed partial rows, marked as stream input."""
    return parsed.where(F.col("error").isNull()).select(
        *pipeline.keys, *event_as_partial(pipeline, pipeline.aggregations, keyed=True),
        F.lit(1).cast("long").alias(EVENTS_SEEN))


def merged_state(pipeline: Pipeline, partials: DataFrame) -> DataFrame:
    """The running keyed state over seed and event partials; EVENTS_SEEN tells seed-only keys apart."""
    return (partials.groupBy(*pipeline.keys)
            .agg(*merge_aggregations(pipeline.aggregations, keyed=True, events=True),
                 F.sum(EVENTS_SEEN).alias(EVENTS_SEEN))
            .select(*pipeline.keys, *flatten_last(pipeline.aggregations, keyed=True), EVENTS_SEEN))


def update_messages(pipeline: Pipeline, changed: DataFrame, handoff_id: str) -> DataFrame:
    """Changed keys as updates-topic records: key, the whole state as JSON, the handoff as a header."""
    return changed.select(
        update_key(pipeline.keys).cast("binary").alias("key"),
        F.to_json(F.struct(*[F.col(c) for c in changed.columns]), JSON_OPTIONS).cast("binary").alias("value"),
        handoff_headers(handoff_id).alias("headers"))


def keyed_updates(pipeline: Pipeline, merged: DataFrame, handoff_id: str, version_base: int) -> DataFrame:
    """What the keyed query writes, through Spark's own Kafka sink (no Python between a record and its
    update): the keys a batch changed with their whole new state and its UPDATE_VERSION (`version_base` plus the
    key's stream events so far). Seed-only keys (EVENTS_SEEN 0) are not news. A replay may resend a batch's
    updates: an update is the key's whole state, so a copy changes nothing."""
    changed = (merged.where(F.col(EVENTS_SEEN) > 0)
               .withColumn(UPDATE_VERSION, F.lit(version_base).cast("long") + F.col(EVENTS_SEEN)).drop(EVENTS_SEEN))
    return update_messages(pipeline, changed, handoff_id)


class KeyedCrashPoint(StreamingQueryListener):
    """`stream.keyed.after_send` for the native sink, which has no Python step: reached when the keyed query
    reports a batch (its updates sent and the batch in its checkpoint), before `state` has merged them.
    Registered only while a crash point is armed, so it never sits in a production stream."""

    def __init__(self, query_name: str):
        self.query_name = query_name

    def onQueryStarted(self, event) -> None:
        pass

    def onQueryProgress(self, event) -> None:
        if event.progress.name == self.query_name and event.progress.numInputRows > 0:
            faults.reach("stream.keyed.after_send")

    def onQueryIdle(self, event) -> None:
        pass

    def onQueryTerminated(self, event) -> None:
        pass


def start_keyed_query(spark: SparkSession, pipeline: Pipeline, bootstrap: str, handoff_id: str, updates_topic: str,
                      paths: StreamPaths, source: DataFrame, trigger: dict, version_base: int = 0) -> StreamingQuery:
    """The keyed query over `source` (the parsed input) and the handoff's seed, in the `keyed` scheduler pool,
    sending to `updates_topic`."""
    seed = spark.readStream.schema(seed_schema(spark, str(paths.seed))).parquet(str(paths.seed))
    context = spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", "keyed")  # inherited by the query's threads
    merged = merged_state(pipeline, keyed_input(pipeline, source).unionByName(seed, allowMissingColumns=True))
    query = (keyed_updates(pipeline, merged, handoff_id, version_base)
             .writeStream.queryName(f"{pipeline.name}-keyed").outputMode("update")
             .format("kafka").options(**spark_options(bootstrap)).option("kafka.acks", "all")
             .option("topic", updates_topic)
             .option("checkpointLocation", str(paths.keyed_checkpoint))
             .trigger(**trigger).start())
    context.setLocalProperty("spark.scheduler.pool", None)
    return query
