"""The bench's arms, each run by `python -m benchmarks worker bench MODE WAREHOUSE BOOTSTRAP TOPIC MAX_OFFSETS` in
a fresh process (its own JVM): streaming-only, switchyard, batch-only (state alone or every table) and the
backfill's hash strategy; each prints its wall seconds and where they went."""

from __future__ import annotations

import json
import os
import time

from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.step_times import StepTimes
from switchyard.state_handoff.io.kafka_security import spark_source_options


def _empty_start(spark, pipeline, tables, topic: str) -> None:
    """Streaming-only: no archive, empty state, a handoff at the earliest offsets of every partition."""
    from switchyard.jobs.aggregation import state_from_partials, tiles_from_events, window_partials_from_tiles
    from switchyard.state_handoff.control import handoff_log
    from switchyard.state_handoff.control.details import BackfillCommitted
    from switchyard.state_handoff.io.archive_files import write_archive_meta
    from switchyard.state_handoff.language.parsing import parse_events

    nothing = spark.createDataFrame([], "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    tiles = tiles_from_events(pipeline, parse_events(pipeline, nothing), "hash")
    state_from_partials(pipeline, tiles).write.format("delta").mode("overwrite").save(tables.state)
    if pipeline.windows is not None:
        windows = window_partials_from_tiles(pipeline, tiles)
        windows.write.format("delta").mode("overwrite").save(tables.windows)
        windows.write.format("delta").mode("overwrite").save(tables.window_state)
    os.makedirs(tables.archive, exist_ok=True)
    write_archive_meta(tables.archive, {"topic": topic, "cut": {}, "first": {}, "records": 0})
    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(tables, handoff_id, Status.BACKFILL_COMMITTED, state_version=0,
                       details=BackfillCommitted(boundary={}, complete=True, records_read=0, mode="streaming-only"))


def run_arm(mode: str, warehouse: str, bootstrap: str, topic: str, max_offsets: int) -> dict:
    """One arm in this process: its wall seconds and the stages they went to."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.handoff import run_handoff
    from switchyard.jobs.stream.options import StreamOptions
    from switchyard.jobs.stream.supervisor import run_stream
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    pipeline = get_pipeline("demo")
    tables = Tables(warehouse, pipeline.name)
    started = time.monotonic()
    times = StepTimes(started)
    stage = times.end

    spark = build_spark(f"switchyard-bench-{mode}")
    stage("spark_start")
    settings = StreamOptions(until_caught_up=True, max_offsets_per_trigger=max_offsets)
    quiet = lambda *_: None  # noqa: E731
    if mode == "streaming_only":
        # streaming only: never switching back to the batch path, which is what B is
        settings.switch_back_lag = None
        _empty_start(spark, pipeline, tables, topic)
        run_handoff(spark, pipeline, tables, bootstrap)
        stage("empty_start")
        run_stream(spark, pipeline, tables, bootstrap, settings, out=quiet)
        stage("stream")
    elif mode == "switchyard":
        from switchyard.jobs.backfill import KeptTiles, backfill_tiles, commit_backfill

        kept = KeptTiles()  # as `switchyard backfill` runs them: the commit reads the tiles its run kept
        tiles_run = backfill_tiles(spark, pipeline, tables, out=quiet, keep=kept)
        stage("backfill_tiles")
        commit_backfill(spark, pipeline, tables, tiles_run, out=quiet, kafka_tail_from=bootstrap, kept=kept)
        stage("commit_state")
        handoff = run_handoff(spark, pipeline, tables, bootstrap)
        stage("handoff")
        run_stream(spark, pipeline, tables, bootstrap, settings, out=quiet)
        stage("stream")
        _stream_laps(tables, handoff.handoff_id, times.parts)
    elif mode == "backfill_hash":
        from switchyard.jobs.backfill import backfill_tiles

        backfill_tiles(spark, pipeline, tables, strategy="hash", out=quiet)
        stage("backfill_tiles")
    elif mode == "batch_only":
        _batch_only(spark, pipeline, tables, bootstrap, topic)
        stage("aggregate")
    elif mode == "batch_full":
        _batch_only(spark, pipeline, tables, bootstrap, topic, every_table=True)
        stage("aggregate")
    else:
        raise ValueError(mode)
    return {"seconds": round(time.monotonic() - started, 3), "stages": times.parts}


def _stream_laps(tables, handoff_id: str, stages: dict) -> None:
    """The tiles run's, the commit's and the stream stage's parts, from the BACKFILL_COMMITTED, SWITCHED and
    CAUGHT_UP entries: `tiles.<lap>`, `commit.<lap>` and `stream.<lap>` seconds."""
    from switchyard.state_handoff.control import details, handoff_log

    committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED, handoff_id)
    if committed is not None:
        backfilled = details.of(committed)
        stages.update({f"tiles.{k}": v for k, v in (backfilled.tiles_s or {}).items()})
        stages.update({f"commit.{k}": v for k, v in (backfilled.commit_s or {}).items()})
    switched = handoff_log.latest(tables, Status.SWITCHED, handoff_id)
    caught_up = handoff_log.latest(tables, Status.CAUGHT_UP, handoff_id)
    if switched is None:
        return
    stages.update({f"stream.{k}": v for k, v in (details.of(switched).startup_s or {}).items()})
    if caught_up is not None:
        stages["stream.switched_to_caught_up"] = round((caught_up.at - switched.at).total_seconds(), 3)


def _batch_only(spark, pipeline, tables, bootstrap: str, topic: str, every_table: bool = False) -> None:
    """The lower bound: archive files plus the un-archived tail read from Kafka in batch, one hash aggregation.

    every_table: the same outputs as A and B (state, final and open windows, dead letters) from one parse, so
    B/C compares equal work; a batch job sees every record, so no record is late here.
    """
    from pyspark.sql import functions as F

    from switchyard.jobs.aggregation import backlog_watermark, tile_start
    from switchyard.jobs.sinks import batch_window_partials
    from switchyard.state_handoff.io.archive_files import archive_meta
    from switchyard.state_handoff.language.aggregates import event_aggregations, flatten_last
    from switchyard.state_handoff.language.parsing import cached_for_two_passes, parse_events

    cut = archive_meta(tables.archive)["cut"]
    archived = spark.read.parquet(tables.archive).select("kafka_partition", "kafka_offset", "value")
    tail = (spark.read.format("kafka").options(**spark_source_options(bootstrap)).option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {p: o for p, o in cut.items()}}))
            .option("endingOffsets", "latest").load()
            .select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"), "value"))
    parsed = parse_events(pipeline, archived.unionByName(tail))
    if every_table:
        parsed = cached_for_two_passes(pipeline, parsed)
    events = parsed.where("error IS NULL")
    state = (events.groupBy(*pipeline.keys).agg(*event_aggregations(pipeline, pipeline.aggregations, keyed=True))
             .select(*pipeline.keys, *flatten_last(pipeline.aggregations, keyed=True)))
    state.write.format("delta").mode("overwrite").save(tables.state)
    if not every_table:
        return
    parsed.where("error IS NOT NULL").select("kafka_partition", "kafka_offset", "value", F.col("error").alias("reason")) \
        .write.format("delta").mode("overwrite").save(tables.dead_letter)
    if pipeline.windows is not None:
        watermark = backlog_watermark(pipeline, events.agg(F.max(pipeline.event_time)).first()[0])
        windows = batch_window_partials(pipeline, events.withColumn("window_start", tile_start(pipeline)))
        closed = F.col("window_end") <= F.lit(watermark)
        for part, path in ((closed, tables.windows), (~closed, tables.window_state)):
            windows.where(part).write.format("delta").mode("overwrite").save(path)
    parsed.unpersist()


def worker(argv: list[str]) -> dict:
    mode, warehouse, bootstrap, topic, max_offsets = argv
    return run_arm(mode, warehouse, bootstrap, topic, int(max_offsets))
