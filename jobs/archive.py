"""`switchyard archive`: a Spark batch read of a topic up to a cut into Parquet day folders (stands in for a Kafka-to-files sink)."""

from __future__ import annotations

import json
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from state_handoff.archive_files import file_ranges, write_archive_meta
from state_handoff.errors import UserError
from state_handoff.kafka_io import offset_bounds
from state_handoff.parsing import parse_events
from state_handoff.spec import Pipeline
from state_handoff.tables import Tables

def archive_cut(bootstrap: str, topic: str, fraction: float | None = None,
                until_offsets: str | None = None) -> dict[int, tuple[int, int]]:
    """Per partition: (first offset, exclusive end) to archive."""
    bounds = offset_bounds(bootstrap, topic)
    if (fraction is None) == (until_offsets is None):
        raise UserError("give exactly one of --fraction F or --until-offsets JSON")
    if fraction is not None:
        if not 0.0 <= fraction <= 1.0:
            raise UserError(f"--fraction must be between 0 and 1, not {fraction}")
        return {p: (lo, lo + int((hi - lo) * fraction)) for p, (lo, hi) in bounds.items()}
    try:
        ends = {int(p): int(o) for p, o in json.loads(until_offsets).items()}
    except (ValueError, TypeError, AttributeError):
        raise UserError('--until-offsets must be a JSON object of partition to exclusive end offset, e.g. {"0": 1200, "1": 980}') from None
    unknown = sorted(set(ends) - set(bounds))
    if unknown:
        raise UserError(f"--until-offsets names partition {unknown[0]}, which topic {topic} does not have")
    cut = {}
    for p, (lo, hi) in bounds.items():
        end = ends.get(p, lo)
        if not lo <= end <= hi:
            raise UserError(f"--until-offsets: partition {p} end {end} is outside the retained range {lo}..{hi}")
        cut[p] = (lo, end)
    return cut


def run_archive(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, topic: str,
                cut: dict[int, tuple[int, int]], out=print) -> str:
    started = time.monotonic()
    out(f"archive {pipeline.name}: reading {topic} offsets "
        + ", ".join(f"p{p}:{lo}..{hi}" for p, (lo, hi) in sorted(cut.items())))
    records = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic)
               .option("startingOffsets", json.dumps({topic: {str(p): lo for p, (lo, _) in cut.items()}}))
               .option("endingOffsets", json.dumps({topic: {str(p): hi for p, (_, hi) in cut.items()}}))
               .option("failOnDataLoss", "true")
               .load()
               .select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                       F.col("timestamp").alias("kafka_timestamp"), F.col("key").alias("kafka_key"), "value"))
    parsed = parse_events(pipeline, records)
    event_date = F.coalesce(F.to_date(pipeline.event_time), F.to_date("kafka_timestamp"))
    archived = parsed.select("kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "value",
                             event_date.alias("event_date"))
    archived.write.mode("overwrite").partitionBy("event_date").parquet(tables.archive)
    total = sum(hi - lo for lo, hi in cut.values())
    write_archive_meta(tables.archive, {"topic": topic, "cut": {str(p): hi for p, (_, hi) in sorted(cut.items())},
                                        "first": {str(p): lo for p, (lo, _) in sorted(cut.items())},
                                        "records": total, "files": file_ranges(tables.archive)})
    seconds = time.monotonic() - started
    return (f"archive {pipeline.name}: {total} records from {topic} into {tables.archive} "
            f"in {seconds:.1f}s ({total / max(seconds, 1e-9):,.0f} records/s)")
