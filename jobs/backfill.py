"""`switchyard backfill` (isBacklog = true): archive days to per-day tiles, tiles to keyed state and windows."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import date, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.aggregation import (SORT, TILE_START, backlog_watermark, newest_event_time, state_from_partials,
                              tiles_from_events, window_partials_from_tiles)
from state_handoff import handoff_log
from state_handoff.archive_files import ArchiveFile, list_archive, missing_column, unreadable
from state_handoff.errors import UserError
from state_handoff.parsing import parse_events
from state_handoff.spec import Pipeline
from state_handoff.tables import Tables

ARCHIVE_COLUMNS = ("kafka_partition", "kafka_offset", "value")


@dataclass
class BackfillResult:
    handoff_id: str | None
    first_day: date | None
    last_day: date | None
    records_read: int = 0
    well_formed: int = 0
    dead_lettered: int = 0
    keys: int = 0
    state_version: int | None = None
    backlog_watermark: datetime | None = None
    boundary: dict[int, int] = field(default_factory=dict)
    accounting: dict[int, dict[str, int]] = field(default_factory=dict)
    skipped_files: list[str] = field(default_factory=list)
    seconds: float = 0.0
    message: str = ""

    def summary(self, pipeline: str) -> str:
        if self.handoff_id is None:
            return self.message
        rate = self.records_read / self.seconds if self.seconds else 0.0
        return (f"backfill {pipeline} {self.first_day}..{self.last_day}: read {self.records_read:,} records, "
                f"{self.keys:,} keys, {self.dead_lettered:,} dead-lettered, {self.seconds:.1f}s, {rate:,.0f} records/s")


def _day(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UserError(f"{flag} must be a date like 2026-01-31, not {text!r}") from None


def check_files(files: list[ArchiveFile], skip_bad_files: bool, out) -> tuple[list[ArchiveFile], list[str]]:
    """Every archive file is checked before anything is written (all of them give the boundary offsets);
    a bad one stops the run or, with skip_bad_files, is left out and reported."""
    chosen, skipped = [], []
    for f in files:
        problem = unreadable(f.path)
        if problem:
            if not skip_bad_files:
                raise UserError(f"archive file {f.path} is not readable Parquet ({problem}): "
                                "repair or remove it, or rerun with --skip-bad-files")
            out(f"  skipping unreadable file {f.path}: {problem}")
            skipped.append(f.path)
            continue
        column = missing_column(f.path)
        if column:
            raise UserError(f"archive file {f.path} lacks required column {column}: rewrite it with `switchyard archive`")
        chosen.append(f)
    return chosen, skipped


def read_archive(spark: SparkSession, tables: Tables, files: list[ArchiveFile]) -> DataFrame:
    schema = "kafka_partition INT, kafka_offset BIGINT, value BINARY, event_date DATE"
    if not files:
        return spark.createDataFrame([], schema)
    return (spark.read.option("basePath", tables.archive).parquet(*[f.path for f in files])
            .select(*ARCHIVE_COLUMNS, F.col("event_date").cast("date")))


def _delta_version(spark: SparkSession, path: str) -> int:
    from delta.tables import DeltaTable

    return DeltaTable.forPath(spark, path).history(1).first()["version"]


def _replace_days(df: DataFrame, path: str, first: date, last: date, condition: str = "") -> None:
    where = f"event_date >= '{first}' AND event_date <= '{last}'" + (f" AND {condition}" if condition else "")
    (df.write.format("delta").mode("overwrite").option("replaceWhere", where)
     .partitionBy("event_date").save(path))


def run_backfill(spark: SparkSession, pipeline: Pipeline, tables: Tables, first_day: str | None = None,
                 last_day: str | None = None, skip_bad_files: bool = False, strategy: str = SORT,
                 out=print) -> BackfillResult:
    started = time.monotonic()
    first, last = _day(first_day, "--from"), _day(last_day, "--to")
    files = list_archive(tables.archive)
    days = sorted({f.day for f in files})
    if not days:
        raise UserError(f"the archive at {tables.archive} holds no day folders: run `switchyard archive` first")
    first, last = first or days[0], last or days[-1]
    if first > last:
        raise UserError(f"empty date range: --from {first} is after --to {last}")
    out(f"[1/5] checking {len(files)} archive files")
    readable, skipped = check_files(files, skip_bad_files, out)
    if not any(first <= d <= last for d in days):
        return BackfillResult(None, first, last, message=(
            f"backfill {pipeline.name}: the archive has no days between {first} and {last} "
            f"(it holds {days[0]}..{days[-1]}); nothing changed"))

    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(spark, tables, handoff_id, handoff_log.BACKFILL_STARTED,
                       details={"from": str(first), "to": str(last), "strategy": strategy})
    try:
        result = _backfill(spark, pipeline, tables, first, last, readable, strategy, out)
    except Exception as err:
        handoff_log.append(spark, tables, handoff_id, handoff_log.FAILED,
                           details={"phase": "backfill", "reason": str(err).splitlines()[0][:500]})
        raise
    result.handoff_id, result.skipped_files = handoff_id, skipped
    result.seconds = time.monotonic() - started
    handoff_log.append(spark, tables, handoff_id, handoff_log.BACKFILL_COMMITTED,
                       state_version=result.state_version, backlog_watermark=result.backlog_watermark,
                       details={"from": str(first), "to": str(last), "boundary": result.boundary,
                                "records_read": result.records_read, "well_formed": result.well_formed,
                                "dead_lettered": result.dead_lettered, "keys": result.keys,
                                "accounting": result.accounting, "skipped_files": skipped, "strategy": strategy,
                                "duration_s": round(result.seconds, 3)})
    return result


def _backfill(spark: SparkSession, pipeline: Pipeline, tables: Tables, first: date, last: date,
              readable: list[ArchiveFile], strategy: str, out) -> BackfillResult:
    result = BackfillResult(None, first, last)
    files = [f for f in readable if first <= f.day <= last]
    parsed = parse_events(pipeline, read_archive(spark, tables, files))

    out(f"[2/5] sorting and aggregating {len(files)} files into day tiles ({strategy})")
    well_formed = parsed.where(F.col("error").isNull())
    _replace_days(tiles_from_events(pipeline, well_formed, strategy), tables.tiles, first, last)

    out("[3/5] dead-lettering malformed records")
    dead = parsed.where(F.col("error").isNotNull()).select(
        "kafka_partition", "kafka_offset", "value", F.col("error").alias("reason"), F.lit("backfill").alias("phase"),
        F.current_timestamp().alias("recorded_at"), "event_date")
    _replace_days(dead, tables.dead_letter, first, last, "phase = 'backfill'")

    out("[4/5] merging all tiles into keyed state and windows")
    tiles = spark.read.format("delta").load(tables.tiles)
    state = state_from_partials(pipeline, tiles)
    state.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(tables.state)
    result.state_version = _delta_version(spark, tables.state)
    state_now = spark.read.format("delta").option("versionAsOf", result.state_version).load(tables.state)
    result.backlog_watermark = backlog_watermark(pipeline, newest_event_time(state_now))
    if pipeline.windows is not None:
        windows = window_partials_from_tiles(pipeline, tiles)
        closed = F.col("window_end") <= F.lit(result.backlog_watermark)
        windows.where(closed).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(tables.windows)
        windows.where(~closed).write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(tables.window_state)

    out("[5/5] accounting and boundary offsets")
    archived = read_archive(spark, tables, readable)
    result.boundary = {int(r[0]): int(r[1]) for r in
                       archived.groupBy("kafka_partition").agg(F.max("kafka_offset")).collect()}
    result.accounting = _accounting(spark, pipeline, tables, files, first, last)
    result.records_read = sum(a["read"] for a in result.accounting.values())
    result.well_formed = sum(a["well_formed"] for a in result.accounting.values())
    result.dead_lettered = sum(a["dead_lettered"] for a in result.accounting.values())
    unbalanced = {p: a for p, a in result.accounting.items() if a["read"] != a["well_formed"] + a["dead_lettered"]}
    if unbalanced:
        raise RuntimeError(f"accounting identity broken (read != well-formed + dead-lettered): {unbalanced}")
    result.keys = state_now.count()
    return result


def _accounting(spark: SparkSession, pipeline: Pipeline, tables: Tables, files: list[ArchiveFile],
                first: date, last: date) -> dict[int, dict[str, int]]:
    """Per Kafka partition over the range: records read, well-formed (aggregated into tiles), dead-lettered.

    Counted from three independent places (archive files, tiles, dead_letter) so a lost record shows.
    """
    days = (F.col("event_date") >= F.lit(first)) & (F.col("event_date") <= F.lit(last))
    count_col = pipeline.count_column
    tiles = spark.read.format("delta").load(tables.tiles).where(days)
    well_formed = (tiles.groupBy("kafka_partition").agg(F.sum(count_col)) if count_col else
                   parse_events(pipeline, read_archive(spark, tables, files)).where("error IS NULL")
                   .groupBy("kafka_partition").count())
    dead = (spark.read.format("delta").load(tables.dead_letter).where(days & (F.col("phase") == "backfill"))
            .groupBy("kafka_partition").count())
    read = read_archive(spark, tables, files).groupBy("kafka_partition").count()
    accounting: dict[int, dict[str, int]] = {}
    for name, df in (("read", read), ("well_formed", well_formed), ("dead_lettered", dead)):
        for partition, n in df.collect():
            accounting.setdefault(int(partition), {"read": 0, "well_formed": 0, "dead_lettered": 0})[name] = int(n)
    return dict(sorted(accounting.items()))
