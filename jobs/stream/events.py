"""The events query: the handoff's input topic from its start offsets, parsed, through the events sink
(jobs/sinks.py) into Delta. The same parsed input, without the overlap records the archive already holds, feeds
the keyed query."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from switchyard.jobs.sinks import SKIPPED_OVERLAP, EventsSink, mark_overlap
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.io.kafka_security import spark_source_options
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import StreamPaths


def kafka_records(spark: SparkSession, bootstrap: str, topic: str, start: dict[int, int],
                  max_offsets_per_trigger: int | None, with_key: bool = False) -> DataFrame:
    reader = (spark.readStream.format("kafka").options(**spark_source_options(bootstrap))
              .option("subscribe", topic)
              .option("startingOffsets", json.dumps({topic: {str(p): o for p, o in start.items()}}))
              .option("failOnDataLoss", "true"))
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", max_offsets_per_trigger)
    key = [F.col("key").alias("kafka_key")] if with_key else []
    return reader.load().select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                                F.col("timestamp").alias("kafka_timestamp"), *key, "value")


def added_partitions(bootstrap: str, handoff: Handoff, fresh: bool) -> dict[int, int]:
    """The partitions the topic gained after the handoff, each with the offset the stream reads it from: 0, since
    every record of such a partition came after the handoff's cut (a partition added while the stream runs, Spark's
    source reads from its earliest offset the same way). `fresh` (the stream has no checkpoint yet): a gained
    partition that no longer retains offset 0 lost records nothing read, and is refused."""
    added = {p: lo for p, (lo, _) in offset_bounds(bootstrap, handoff.topic).items() if p not in handoff.start_offsets}
    lost = sorted((p, lo) for p, lo in added.items() if lo > 0)
    if fresh and lost:
        p, lo = lost[0]
        raise UserError(f"partition {p} of topic {handoff.topic} was added after handoff {handoff.handoff_id} and its "
                        f"offsets 0..{lo - 1} are gone from Kafka: hand off again from what is retained "
                        "(`switchyard archive`, `switchyard backfill`, `switchyard handoff`)")
    return {p: 0 for p in sorted(added)}


def parsed_input(spark: SparkSession, pipeline: Pipeline, bootstrap: str, handoff: Handoff,
                 max_offsets_per_trigger: int | None, added: dict[int, int] | None = None
                 ) -> tuple[DataFrame, DataFrame]:
    """The handoff's parsed input for the events query (a time-mode handoff's overlap records marked
    SKIPPED_OVERLAP when archived) and for the keyed query (those records left out). `added`: partitions the topic
    gained after the handoff and their start (`added_partitions`); Spark's source wants a start for every
    partition of the topic when it starts without a checkpoint."""
    start = {**handoff.start_offsets, **(added or {})}
    parsed = parse_events(pipeline, kafka_records(spark, bootstrap, handoff.topic, start,
                                                  max_offsets_per_trigger, with_key=handoff.overlap is not None),
                          live=True)
    keyed_source = parsed
    if handoff.overlap is not None:
        parsed = mark_overlap(pipeline, parsed, spark.read.parquet(handoff.overlap.path), handoff.overlap)
        keyed_source = parsed.where(~F.col(SKIPPED_OVERLAP))
    return parsed, keyed_source


def start_events_query(spark: SparkSession, pipeline: Pipeline, parsed: DataFrame, sink: EventsSink,
                       paths: StreamPaths, trigger: dict) -> StreamingQuery:
    """The events query over `parsed`, each batch through `sink`, in the `events` scheduler pool."""
    context = spark.sparkContext
    context.setLocalProperty("spark.scheduler.pool", "events")  # inherited by the query's threads
    query = (parsed.writeStream.queryName(f"{pipeline.name}-events").foreachBatch(sink)
             .option("checkpointLocation", str(paths.events_checkpoint))
             .trigger(**trigger).start())
    context.setLocalProperty("spark.scheduler.pool", None)
    return query
