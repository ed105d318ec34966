"""The backlog's inputs: the archive's days and files (checked before anything is written, then read), and a
bounded Kafka offset range read in batch."""

from __future__ import annotations

import json
from datetime import date, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff.control.lost_offsets import archive_holds
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import (ArchiveFile, ArchiveListing, missing_column, read_listing,
                                                       unreadable)
from switchyard.state_handoff.io.archive_record import check_record
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.io.kafka_security import spark_source_options
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

ARCHIVE_COLUMNS = ("kafka_partition", "kafka_offset", "value")


def _day(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UserError(f"{flag} must be a date like 2026-01-31, not {text!r}") from None


def resolve_range(tables: Tables, first_day: str | None,
                  last_day: str | None) -> tuple[date, date, ArchiveListing, list[date]]:
    """The days first_day..last_day (the archive's first and last when not given), the archive's listing (its
    files and metadata, read once for the whole step, its record checked) and the days it holds."""
    first, last = _day(first_day, "--from"), _day(last_day, "--to")
    archive = read_listing(tables.archive)
    check_record(tables.archive, archive.meta)
    days = sorted({f.day for f in archive.files})
    if not days:
        raise UserError(f"the archive at {tables.archive} holds no day folders: run `switchyard archive` first")
    first, last = first or days[0], last or days[-1]
    if first > last:
        raise UserError(f"empty date range: --from {first} is after --to {last}")
    return first, last, archive, days


def file_problem(archive: ArchiveListing, f: ArchiveFile) -> str | None:
    """Why a committed archive file cannot be read ("missing", or pyarrow's complaint); None when it reads."""
    return "missing" if f.path in archive.missing else unreadable(f.path)


def bad_file(archive: ArchiveListing, f: ArchiveFile, problem: str) -> UserError:
    """The one-line refusal of a committed file that is missing or unreadable, with the offsets it held."""
    what = "is missing" if problem == "missing" else f"is not readable Parquet ({problem})"
    return UserError(f"archive file {f.path} {what}; the archive record says it held {_held(archive, f.path)}: "
                     "restore it, or rerun with --skip-bad-files")


def check_files(archive: ArchiveListing, skip_bad_files: bool, out) -> tuple[list[ArchiveFile], list[str]]:
    """Every archive file is checked before anything is written (all of them give the boundary offsets); a
    missing or unreadable one stops the run, naming the offsets the archive record says it held, or, with
    skip_bad_files, is left out and reported with them (a recorded gap, which the handoff refuses)."""
    chosen, skipped = [], []
    for f in archive.files:
        problem = file_problem(archive, f)
        if problem:
            if not skip_bad_files:
                raise bad_file(archive, f, problem)
            why = "missing" if problem == "missing" else f"unreadable ({problem})"
            warnings_to(out)(f"  skipping {why} file {f.path}; it held {_held(archive, f.path)}")
            skipped.append(f.path)
            continue
        column = missing_column(f.path)
        if column:
            raise UserError(f"archive file {f.path} lacks required column {column}: rewrite it with `switchyard archive`")
        chosen.append(f)
    return chosen, skipped


def verify_archive(tables: Tables) -> None:
    """Raise UserError when the archive's record does not tile it or a file it names is missing or unreadable:
    what a step that will read the whole archive (a rebase) checks before it changes anything."""
    archive = read_listing(tables.archive)
    check_record(tables.archive, archive.meta)
    check_files(archive, False, lambda *_: None)


def _held(archive: ArchiveListing, path: str) -> str:
    ranges = archive.recorded_ranges([path])[path]
    if ranges is None:
        return "offsets the archive metadata does not record"
    return ", ".join(f"p{p}:{lo}..{hi} ({n} records)" for p, (lo, hi, n) in sorted(ranges.items()))


def skipped_gaps(archive: ArchiveListing, skipped: list[str], boundary: dict[int, int]) -> list[dict]:
    """Per skipped file and partition, the offsets it held (from the archive metadata; null when not recorded)
    and whether any lies at or below the boundary, where the stream will not read them either."""
    gaps = []
    for path, ranges in archive.recorded_ranges(skipped).items():
        if ranges is None:
            gaps.append({"file": path, "partition": None, "from": None, "to": None, "records": None,
                         "below_boundary": True})
            continue
        gaps.extend({"file": path, "partition": p, "from": lo, "to": hi, "records": n,
                     "below_boundary": p in boundary and lo <= boundary[p]}
                    for p, (lo, hi, n) in sorted(ranges.items()))
    return gaps


def read_archive(spark: SparkSession, tables: Tables, files: list[ArchiveFile]) -> DataFrame:
    """The records of `files` with the day folder each lies in as its `event_date`."""
    schema = "kafka_partition INT, kafka_offset BIGINT, value BINARY, event_date DATE"
    if not files:
        return spark.createDataFrame([], schema)
    return (spark.read.option("basePath", tables.archive).parquet(*[f.path for f in files])
            .select(*ARCHIVE_COLUMNS, F.col("event_date").cast("date")))


def retained_or_archived_range(spark: SparkSession, tables: Tables, bootstrap: str, topic: str,
                               start: dict[int, int], end: dict[int, int]) -> DataFrame:
    """The records of [start, end) per partition as `kafka_range` reads them, except the offsets Kafka's retention
    deleted since: those are read from the archive when it holds them (from its first offset to past them; a
    record's Kafka timestamp is then its archive day's midnight). What neither holds is refused as `kafka_range`
    refuses it."""
    earliest = {p: lo for p, (lo, _) in offset_bounds(bootstrap, topic).items()}
    gone = {p: (start.get(p, 0), min(earliest.get(p, 0), hi)) for p, hi in end.items()
            if start.get(p, 0) < min(earliest.get(p, 0), hi)}
    if not gone:
        return kafka_range(spark, bootstrap, topic, start, end)
    if not archive_holds(tables, topic, gone):
        return kafka_range(spark, bootstrap, topic, start, end)  # refused there, naming the first offset gone
    listing = read_listing(tables.archive)
    if listing.missing:  # refused there too: the archive's own check names the missing file when it runs
        return kafka_range(spark, bootstrap, topic, start, end)
    ranges = listing.recorded_ranges([f.path for f in listing.files])
    needed = [f for f in listing.files
              if ranges[f.path] is None or any(p in gone and r[0] < gone[p][1] and r[1] >= gone[p][0]
                                               for p, r in ranges[f.path].items())]
    wanted = None
    for p, (lo, hi) in gone.items():
        one = (F.col("kafka_partition") == p) & (F.col("kafka_offset") >= lo) & (F.col("kafka_offset") < hi)
        wanted = one if wanted is None else wanted | one
    archived = (read_archive(spark, tables, needed).where(wanted)
                .select("kafka_partition", "kafka_offset",
                        F.col("event_date").cast("timestamp").alias("kafka_timestamp"), "value"))
    rest = kafka_range(spark, bootstrap, topic, {**start, **{p: hi for p, (_, hi) in gone.items()}}, end)
    return rest.unionByName(archived)


def kafka_range(spark: SparkSession, bootstrap: str, topic: str, start: dict[int, int], end: dict[int, int],
                with_key: bool = False) -> DataFrame:
    """The records of [start, end) per partition, read in batch, shaped as the stream's readers see them."""
    ranges = {p: (start.get(p, 0), end[p]) for p in end if end[p] > start.get(p, 0)}
    if not ranges:
        key = ", kafka_key BINARY" if with_key else ""
        return spark.createDataFrame([], "kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP"
                                         f"{key}, value BINARY")
    bounds = offset_bounds(bootstrap, topic)
    for p, (lo, _) in sorted(ranges.items()):
        if bounds[p][0] > lo:
            raise UserError(f"topic {topic} partition {p} no longer retains offset {lo} (retained from "
                            f"{bounds[p][0]}), which the backlog must read: archive past it, then run again")
    key = [F.col("key").alias("kafka_key")] if with_key else []
    # assign, not subscribe: a partition with nothing in the range is left out of the offsets, and Spark refuses
    # offsets that do not name every partition it was given ("Partitions specified ... don't match")
    return (spark.read.format("kafka").options(**spark_source_options(bootstrap))
            .option("assign", json.dumps({topic: sorted(ranges)}))
            .option("startingOffsets", json.dumps({topic: {str(p): lo for p, (lo, _) in ranges.items()}}))
            .option("endingOffsets", json.dumps({topic: {str(p): hi for p, (_, hi) in ranges.items()}}))
            .option("failOnDataLoss", "true").load()
            .select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                    F.col("timestamp").alias("kafka_timestamp"), *key, "value"))


def newest_archived_event_time(spark: SparkSession, pipeline: Pipeline, tables: Tables) -> datetime | None:
    """The greatest well-formed event time in the archive, searched from the newest day folder back."""
    listing = read_listing(tables.archive)
    files = [f for f in listing.files if f.path not in listing.missing and unreadable(f.path) is None]
    for day in sorted({f.day for f in files}, reverse=True):
        parsed = parse_events(pipeline, read_archive(spark, tables, [f for f in files if f.day == day]))
        newest = parsed.where(F.col("error").isNull()).agg(F.max(pipeline.event_time)).first()[0]
        if newest is not None:
            return newest
    return None


def archived_boundary(spark: SparkSession, tables: Tables, archive: ArchiveListing,
                      readable: list[ArchiveFile]) -> dict[int, int]:
    """Per partition, the highest offset the readable archive files hold: from the ranges the archive metadata
    recorded when it wrote them, else (an archive older than those) read from the files."""
    recorded = archive.recorded_ranges([f.path for f in readable])
    if all(r is not None for r in recorded.values()):
        boundary: dict[int, int] = {}
        for ranges in recorded.values():
            for p, (_, hi, _) in ranges.items():
                boundary[p] = max(hi, boundary.get(p, hi))
        return boundary
    return {int(p): int(o) for p, o in
            read_archive(spark, tables, readable).groupBy("kafka_partition").agg(F.max("kafka_offset")).collect()}
