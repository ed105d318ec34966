"""`switchyard archive --from-connect PATH`: an archive a team already has, written by Kafka Connect's S3 sink,
taken in as the pipeline's archive.

The sink names each file `<topic>+<partition>+<startOffset>.<json|parquet>` (under `topics/<topic>/partition=<p>/`
by default; any depth below PATH is read). Its JSON format holds one record value per line; its Parquet format one
row per record, which is kept as the row's JSON. Neither holds the offsets: a record's offset is its file's start
offset plus its place in the file, which holds only where the file's records lie at consecutive offsets. Kafka
leaves offsets without a record (a transaction's markers and aborted records, compaction), and where they fall
among a file's records cannot be known from the file. So a file's records must fill its offsets exactly: up to the
next file's start (a file's start is the previous file's start plus its records, as the archive record demands of
switchyard's own runs), and for a partition's last file, which nothing follows, as Kafka shows them from its start.
A gap, an overlap, or a last file whose records Kafka does not show at consecutive offsets (or no longer holds) is
refused in one line naming the partition and the offsets, and nothing is committed.

The records are copied into switchyard's archive layout (day folders, each record with its partition and offset)
and committed in its record like any archive run, from the archive's current cut on: files wholly below it are
archived already and skipped. A record without a valid event time goes to the day of the record before it in its
partition (the Connect files keep no Kafka timestamp to fall back on).
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass, replace
from functools import reduce

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from switchyard.jobs.archive import prepare, write_and_commit
from switchyard.state_handoff.control.lease import Lease
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_io, storage
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

NAME = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+)\.(?P<format>json|parquet)$")


@dataclass(frozen=True)
class ConnectFile:
    path: str
    topic: str
    partition: int
    start: int
    format: str
    records: int = 0

    @property
    def end(self) -> int:
        return self.start + self.records


def connect_files(path: str, topic: str | None) -> list[ConnectFile]:
    """The sink's files below `path` (of `topic`, or of the one topic they hold), by partition and start offset."""
    found = []
    for uri in storage.list_files(path):
        match = NAME.match(uri.rsplit("/", 1)[-1])
        if match:
            found.append(ConnectFile(uri, match["topic"], int(match["partition"]), int(match["start"]),
                                     match["format"]))
    topics = sorted({f.topic for f in found})
    if not found:
        raise UserError(f"no Kafka Connect files (<topic>+<partition>+<startOffset>.json or .parquet) below {path}")
    if topic is None and len(topics) > 1:
        raise UserError(f"{path} holds the topics {', '.join(topics)}: name one with --topic")
    topic = topic or topics[0]
    if topic not in topics:
        raise UserError(f"{path} holds no files of topic {topic} (it holds {', '.join(topics)})")
    return sorted((f for f in found if f.topic == topic), key=lambda f: (f.partition, f.start))


def _lines(spark: SparkSession, files: list[ConnectFile]) -> DataFrame:
    """Every record of `files`: its partition, its file's start offset, its place in the file and its value."""
    starts = spark.createDataFrame([(f.path, f.partition, f.start) for f in files],
                                   "path STRING, kafka_partition INT, start BIGINT")
    parts = []
    jsons = [f.path for f in files if f.format == "json"]
    if jsons:
        whole = spark.read.text(jsons, wholetext=True).select(
            F.col("_metadata.file_path").alias("path"),
            F.posexplode(F.split(F.regexp_replace("value", r"\n$", ""), "\n")).alias("position", "line"))
        parts.append(whole.select("path", F.col("position").cast("long"), F.col("line").cast("binary")
                                  .alias("value")))
    parquets = [f.path for f in files if f.format == "parquet"]
    if parquets:
        rows = spark.read.parquet(*parquets)
        parts.append(rows.select(F.col("_metadata.file_path").alias("path"),
                                 F.col("_metadata.row_index").cast("long").alias("position"),
                                 F.to_json(F.struct(*[F.col(c) for c in rows.columns])).cast("binary")
                                 .alias("value")))
    # Spark reports each file as a URI (file:/..., s3a://bucket/...): matched on what follows the scheme
    def bare(column: str):
        return F.regexp_replace(F.col(column), r"^([a-z0-9]+:)?/*", "")

    lines = reduce(DataFrame.unionByName, parts)
    return (lines.withColumn("path", bare("path"))
            .join(starts.withColumn("path", bare("path")).hint("broadcast"), "path")
            .select("kafka_partition", "start", "position", "value"))


def check_contiguous(files: list[ConnectFile]) -> dict[int, tuple[int, int]]:
    """Per partition, (first offset, exclusive end) of its files, refusing a gap or an overlap between two."""
    ranges: dict[int, tuple[int, int]] = {}
    for f in files:
        if f.partition not in ranges:
            ranges[f.partition] = (f.start, f.end)
            continue
        first, end = ranges[f.partition]
        if f.start != end:
            what = (f"offsets {end}..{f.start - 1} are in no file" if f.start > end
                    else f"offsets {f.start}..{end - 1} are in two files")
            raise UserError(f"Kafka Connect archive: partition {f.partition}: {what} (before "
                            f"{f.path.rsplit('/', 1)[-1]}; a file is missing, or Kafka left offsets without a record "
                            "among a file's, where the file cannot tell): restore the missing file, or archive those "
                            "offsets from the topic")
        ranges[f.partition] = (first, f.end)
    return ranges


def check_last_files(bootstrap: str, topic: str, files: list[ConnectFile], partitions) -> None:
    """Refuse a partition's last file (of `partitions`) unless Kafka shows its records at the consecutive offsets
    from its start that it is read as: no next file bounds it, and a gap among its records would number every
    record after the gap below its real offset, so the stream would read the file's last records again."""
    last = {f.partition: f for f in files if f.partition in partitions}
    for p, f in sorted(last.items()):
        if not f.records:
            continue
        name = f.path.rsplit("/", 1)[-1]
        seen = kafka_io.record_offsets(bootstrap, topic, p, f.start, f.end)
        if seen is None:
            raise UserError(f"Kafka Connect archive: partition {p}: Kafka no longer holds offset {f.start}, where "
                            f"{name} starts, so whether its {f.records} records lie at offsets {f.start}..{f.end - 1} "
                            "cannot be checked: take in the Connect files while Kafka holds the newest one's "
                            "offsets, or archive from the topic")
        if seen != list(range(f.start, f.end)):
            raise UserError(f"Kafka Connect archive: partition {p}: {name} holds {f.records} records, but Kafka "
                            f"shows {len(seen)} at offsets {f.start}..{f.end - 1} (transaction markers or compaction "
                            "leave offsets without a record), so its records' offsets cannot be known from the "
                            f"file: archive the topic itself with `switchyard archive --topic {topic}`")


def _dated(pipeline: Pipeline, records: DataFrame) -> DataFrame:
    """The archive's columns; a record without a valid event time in the day of the record before it in its
    partition (or after it, at a partition's start; or today, in a partition with no valid event time)."""
    parsed = parse_events(pipeline, records).withColumn("__date", F.to_date(pipeline.event_time))
    before = Window.partitionBy("kafka_partition").orderBy("kafka_offset")
    after = before.rowsBetween(Window.currentRow, Window.unboundedFollowing)
    event_date = F.coalesce(F.last("__date", ignorenulls=True).over(before),
                            F.first("__date", ignorenulls=True).over(after), F.current_date())
    return parsed.select("kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "value",
                         event_date.alias("event_date"))


def import_connect_archive(spark: SparkSession, pipeline: Pipeline, tables: Tables, path: str, bootstrap: str,
                           topic: str | None = None, out=logger.info, lease: Lease | None = None) -> str:
    """Take in the Kafka Connect archive below `path` as the pipeline's archive, from its current cut on; the
    topic on `bootstrap` vouches for the offsets of each partition's last file."""
    started = time.monotonic()
    files = connect_files(path, topic)
    topic = files[0].topic
    lines = _lines(spark, files).persist(StorageLevel.DISK_ONLY)
    try:
        counts = {(int(r.kafka_partition), int(r.start)): int(r.n)
                  for r in lines.groupBy("kafka_partition", "start").agg(F.count(F.lit(1)).alias("n")).collect()}
        files = [replace(f, records=counts.get((f.partition, f.start), 0)) for f in files]
        cut = check_contiguous(files)
        out(f"archive {pipeline.name}: {len(files)} Kafka Connect files of {topic} below {path}, offsets "
            + ", ".join(f"p{p}:{lo}..{hi - 1}" for p, (lo, hi) in sorted(cut.items())))
        root = tables.archive
        version, previous, committed, to_write = prepare(pipeline, root, topic, cut, lease, out)
        reading = {p: r for p, r in to_write.items() if r[1] > r[0]}
        if not reading:
            return f"archive {pipeline.name}: the Kafka Connect files below {path} are archived already"
        check_last_files(bootstrap, topic, files, reading)
        offset = F.col("start") + F.col("position")
        wanted = reduce(lambda a, b: a | b, [(F.col("kafka_partition") == p) & offset.between(lo, hi - 1)
                                             for p, (lo, hi) in reading.items()])
        records = lines.where(wanted).select(
            "kafka_partition", offset.alias("kafka_offset"), F.lit(None).cast("timestamp").alias("kafka_timestamp"),
            F.lit(None).cast("binary").alias("kafka_key"), "value")
        ends, total = write_and_commit(root, version, previous, committed, to_write, topic,
                                       _dated(pipeline, records), lease, source={"from_connect": path})
    finally:
        lines.unpersist()
    seconds = time.monotonic() - started
    return (f"archive {pipeline.name}: {total} records of {topic} from Kafka Connect's files into {root} in "
            f"{seconds:.1f}s; the archive now ends at " + ", ".join(f"p{p}:{o}" for p, o in sorted(ends.items())))
