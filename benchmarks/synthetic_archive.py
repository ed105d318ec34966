"""A synthetic archive for backfill benchmarks, written by Spark straight to Parquet in the columns
`switchyard archive` writes (no Kafka): skewed keys, each in one Kafka partition, event times rising with the
offset and jittered backwards, a share of malformed values of five kinds."""

from __future__ import annotations

import glob
import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path

from switchyard.jobs.inputs.generate import KINDS

START = datetime(2026, 1, 1, tzinfo=UTC)
MAX_JITTER_S = 300
MALFORMED_KINDS = 5  # tombstone, not JSON, no key, unparseable event_time, quoted amount


def archive_params(args) -> dict:
    return {"events": args.events, "keys": args.keys, "days": args.days, "partitions": args.partitions,
            "seed": args.seed, "malformed_rate": args.malformed_rate, "layout": 2}


def archive_is_current(archive: Path, params: dict) -> bool:
    meta = archive / "_archive.json"
    if not meta.exists() or not glob.glob(str(archive / "event_date=*" / "*.parquet")):
        return False
    return json.loads(meta.read_text()).get("benchmark") == params


def archive_frame(spark, params: dict):
    """One Spark partition per Kafka partition: offsets 0.. in order, event times rising with the offset.

    Keys are skewed (index = floor(n * u^3) per partition, so low indexes are hot) and every key lives in one
    Kafka partition, as with a keyed producer; event times are jittered up to 5 minutes backwards; about
    `malformed_rate` of the values are malformed in one of five ways.
    """
    from pyspark.sql import functions as F

    n, parts, seed = params["events"], params["partitions"], params["seed"]
    per_partition = -(-n // parts)
    keys_per_partition = max(1, params["keys"] // parts)
    span_us = params["days"] * 86_400 * 1_000_000
    start_us = int(START.timestamp()) * 1_000_000

    rows = spark.range(0, n, 1, numPartitions=parts)
    partition = (F.col("id") / F.lit(per_partition)).cast("int")
    offset = F.col("id") - partition.cast("long") * F.lit(per_partition)
    base_us = F.lit(start_us) + F.floor(offset.cast("double") * F.lit(span_us / per_partition)).cast("long")
    jitter_us = F.floor(F.rand(seed + 1) * F.lit(MAX_JITTER_S * 1_000_000 + 1)).cast("long")
    key_index = (F.floor(F.lit(keys_per_partition) * F.pow(F.rand(seed + 2), 3)).cast("long") * F.lit(parts)
                 + partition)
    cents = F.floor(F.rand(seed + 3) * F.lit(110_001)).cast("long") - F.lit(10_000)
    rows = rows.select(
        partition.alias("kafka_partition"), offset.alias("kafka_offset"),
        F.timestamp_micros(base_us - jitter_us).alias("event_time"),
        F.format_string("key-%07d", key_index).alias("key"),
        F.lpad(F.lower(F.hex(F.xxhash64(F.col("id"), F.lit(seed)))), 16, "0").alias("event_id"),
        (cents.cast("decimal(12,0)") / F.lit(100)).cast("decimal(12,2)").cast("string").alias("amount"),
        F.element_at(F.array(*[F.lit(k) for k in KINDS]),
                     (F.floor(F.rand(seed + 4) * F.lit(len(KINDS))) + 1).cast("int")).alias("kind"),
        F.when(F.rand(seed + 5) < F.lit(params["malformed_rate"]),
               F.pmod(F.col("id"), F.lit(MALFORMED_KINDS))).alias("bad"),
    )
    iso = F.date_format("event_time", "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'")

    def body(*fields):
        return F.concat(F.lit("{"), F.concat_ws(",", *fields), F.lit("}"))

    event_id = F.concat(F.lit('"event_id":"'), "event_id", F.lit('"'))
    key = F.concat(F.lit('"key":"'), "key", F.lit('"'))
    event_time = F.concat(F.lit('"event_time":"'), iso, F.lit('"'))
    amount = F.concat(F.lit('"amount":'), "amount")
    kind = F.concat(F.lit('"kind":"'), "kind", F.lit('"'))
    bad = F.col("bad")
    value = (F.when(bad.isNull(), body(event_id, key, event_time, amount, kind))
             .when(bad == 0, F.lit(None).cast("string"))
             .when(bad == 1, F.lit("not json {"))
             .when(bad == 2, body(event_id, event_time, amount, kind))
             .when(bad == 3, body(event_id, key, F.lit('"event_time":"yesterday"'), amount, kind))
             .otherwise(body(event_id, key, event_time, F.concat(F.lit('"amount":"'), "amount", F.lit('"')), kind)))
    kafka_key = F.when(bad.isNull() | ~bad.isin(1, 2), F.col("key").cast("binary"))
    return rows.select(
        F.col("kafka_partition").cast("int"), F.col("kafka_offset").cast("long"),
        F.col("event_time").alias("kafka_timestamp"), kafka_key.alias("kafka_key"),
        value.cast("binary").alias("value"), F.to_date("event_time").alias("event_date"))


def _file_ranges(spark, archive: Path) -> dict[str, dict[str, list[int]]]:
    """Per file, per partition: its lowest and highest offset and its records, as `switchyard archive` records them
    (the backfill then counts and bounds the archive from the record, not by reading every file)."""
    from urllib.parse import unquote, urlparse

    from pyspark.sql import functions as F

    rows = (spark.read.parquet(str(archive)).select(F.input_file_name().alias("file"), "kafka_partition",
                                                    "kafka_offset")
            .groupBy("file", "kafka_partition")
            .agg(F.min("kafka_offset"), F.max("kafka_offset"), F.count(F.lit(1))).collect())
    files: dict[str, dict[str, list[int]]] = {}
    for file, partition, lo, hi, n in rows:
        relative = os.path.relpath(unquote(urlparse(file).path), archive)
        files.setdefault(relative, {})[str(partition)] = [int(lo), int(hi), int(n)]
    return files


def build_archive(archive: Path, params: dict) -> dict:
    from switchyard.deploy.spark import build_spark
    from switchyard.state_handoff.io.archive_files import write_archive_meta

    started = time.monotonic()
    spark = build_spark("bench-archive")
    if archive.exists():
        shutil.rmtree(archive)
    archive_frame(spark, params).write.mode("overwrite").partitionBy("event_date").parquet(str(archive))
    n, parts = params["events"], params["partitions"]
    per = -(-n // parts)
    ends = {str(p): min(n, (p + 1) * per) - p * per for p in range(parts)}
    write_archive_meta(str(archive), {"topic": f"bench.backfill.{n}", "cut": ends,
                                      "first": {str(p): 0 for p in range(parts)}, "records": n,
                                      "files": _file_ranges(spark, archive), "benchmark": params})
    seconds = time.monotonic() - started
    files = glob.glob(str(archive / "event_date=*" / "*.parquet"))
    size = sum(os.path.getsize(f) for f in files)
    spark.stop()
    return {"seconds": round(seconds, 2), "files": len(files), "bytes": size}
