"""The tiles run: the archived days of a range parsed once into per-day tiles and dead letters, their accounting
checked, and the run recorded so the commit (maybe a separate step, hours later) picks it up."""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import date, datetime

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import SORT, tiles_from_events
from switchyard.jobs.backfill.accounting import Counts, archive_accounting, check_against_record
from switchyard.jobs.backfill.backlog import table_version
from switchyard.jobs.backfill.read import check_files, read_archive, resolve_range
from switchyard.jobs.sinks import dead_letter_rows
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.details import BackfillStarted, Failed
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.step_times import StepTimes
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import fencing, storage
from switchyard.state_handoff.language.parsing import cached_for_two_passes, parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import read_json, write_json_atomically
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


@dataclass
class BackfillResult:
    handoff_id: str | None
    first_day: date | None
    last_day: date | None
    records_read: int = 0
    well_formed: int = 0
    dead_lettered: int = 0
    accounting: dict[int, dict[str, int]] = field(default_factory=dict)
    skipped_files: list[str] = field(default_factory=list)
    keys: int = 0
    state_version: int | None = None
    backlog_watermark: datetime | None = None
    boundary: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0
    message: str = ""
    kafka_tail: dict = field(default_factory=dict)  # topic, from, to, records, accounting: what the commit read
    files: list[str] = field(default_factory=list)  # the archive files the tiles were made from
    tiles_s: dict = field(default_factory=dict)  # where the tiles run's seconds went, by step

    def summary(self, pipeline: str) -> str:
        if self.handoff_id is None:
            return self.message
        tail = self.kafka_tail.get("records")
        read = self.records_read + (tail or 0)
        rate = read / self.seconds if self.seconds else 0.0
        dead = self.dead_lettered + sum(a["dead_lettered"] for a in self.kafka_tail.get("accounting", {}).values())
        return (f"backfill {pipeline} {self.first_day}..{self.last_day}: read {self.records_read:,} archived records"
                + (f" and {tail:,} from the Kafka tail up to its end" if tail is not None else "")
                + f", {self.keys:,} keys, {dead:,} dead-lettered, {self.seconds:.1f}s, {rate:,.0f} records/s")


@dataclass
class KeptTiles:
    """The tiles a run wrote, kept on local disk as the run made them: hash-partitioned by key and sorted within by
    key, tile and partition. A commit in the same process reads them instead of the table when they are all the
    table holds; then the keyed merge and the windows follow the tiles' own partitioning, with no shuffle."""

    frame: DataFrame | None = None
    version: int | None = None  # the `tiles` version the run's write made
    days: tuple[date, date] | None = None  # the run's first and last day: it replaced every tile in between

    def covers(self, version: int | None, days: set[date]) -> bool:
        """Whether the kept tiles are the table's at `version`, whose tiles lie on `days`."""
        return (self.frame is not None and version is not None and version == self.version
                and all(self.days[0] <= d <= self.days[1] for d in days))

    def release(self) -> None:
        if self.frame is not None:
            self.frame.unpersist()
            self.frame = None


@contextmanager
def failure_logged(spark: SparkSession, tables: Tables, handoff_id: str):
    """A run that dies appends FAILED with the reason; committed entries and tables stay as they were."""
    try:
        yield
    except Exception as err:
        handoff_log.append(tables, handoff_id, Status.FAILED,
                           details=Failed(phase="backfill", reason=str(err).strip().splitlines()[0][:500]))
        raise


def _replace_days(df: DataFrame, path: str, first: date, last: date, condition: str = "", whole: bool = False) -> None:
    """Replace the rows of days first..last; `whole`: the table, schema and all (tiles of a changed definition)."""
    where = f"event_date >= '{first}' AND event_date <= '{last}'" + (f" AND {condition}" if condition else "")
    writer = df.write.format("delta").mode("overwrite").options(**fencing.spark_options(path))
    writer = writer.option("overwriteSchema", "true") if whole else writer.option("replaceWhere", where)
    writer.partitionBy("event_date").save(path)


def backfill_tiles(spark: SparkSession, pipeline: Pipeline, tables: Tables, first_day: str | None = None,
                   last_day: str | None = None, skip_bad_files: bool = False, strategy: str = SORT,
                   out=logger.info, keep: KeptTiles | None = None, whole: bool = False) -> BackfillResult:
    """Replace the tiles and dead letters of the archived days first_day..last_day (all when not given).
    `keep`: the tiles written stay on local disk there, for a commit in this process (it releases them).
    `whole`: every archived day, its tiles replacing the whole table (a redeploy's, of another shape)."""
    started = time.monotonic()
    times = StepTimes(started)
    first, last, archive, days = resolve_range(tables, first_day, last_day)
    out(f"[1/5] checking {len(archive.files)} archive files")
    readable, skipped = check_files(archive, skip_bad_files, out)
    times.end("check")
    if not any(first <= d <= last for d in days):
        return BackfillResult(None, first, last, message=(
            f"backfill {pipeline.name}: the archive has no days between {first} and {last} "
            f"(it holds {days[0]}..{days[-1]}); nothing changed"))
    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(tables, handoff_id, Status.BACKFILL_STARTED,
                       details=BackfillStarted(from_=str(first), to=str(last), strategy=strategy))
    result = BackfillResult(handoff_id, first, last, skipped_files=skipped)
    in_range = [f for f in readable if first <= f.day <= last]
    with failure_logged(spark, tables, handoff_id):
        # Parsing is the costly part of the scan: parse once, keep what the tiles and the dead letters read.
        parsed = cached_for_two_passes(pipeline, parse_events(pipeline, read_archive(spark, tables, in_range)))
        try:
            out(f"[2/5] sorting and aggregating {len(in_range)} files into day tiles ({strategy})")
            tiles = tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), strategy)
            if keep is not None:
                tiles = tiles.persist(StorageLevel.DISK_ONLY)  # filled by the write, read again by the commit
            _replace_days(tiles, tables.tiles, first, last, whole=whole)
            if keep is not None:
                keep.frame, keep.version, keep.days = tiles, table_version(tables.tiles), (first, last)
            times.end("parse_and_tiles")
            out("[3/5] dead-lettering malformed records")
            dead = dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), "backfill", F.col("event_date"))
            _replace_days(_not_dead_lettered_by_a_stream(spark, tables, dead), tables.dead_letter, first, last,
                          "phase = 'backfill'")
            times.end("dead_letters")
        finally:
            parsed.unpersist()
        out("[4/5] checking the accounting identity per partition")
        counts = archive_accounting(spark, pipeline, tables, archive, in_range, first, last)
        check_against_record(archive, in_range, counts)
        _set_accounting(result, counts)
        result.files = sorted(f.path for f in in_range)
        times.end("accounting")
    result.seconds = time.monotonic() - started
    result.tiles_s = times.parts
    write_json_atomically(_tiles_run_file(tables, handoff_id), asdict(result))
    faults.reach("backfill.after_tiles")
    return result


def _not_dead_lettered_by_a_stream(spark: SparkSession, tables: Tables, dead: DataFrame) -> DataFrame:
    """Archived records a stream dead-lettered already (before the archive grew over them) stay its own:
    a record is in `dead_letter` once."""
    if not storage.exists(storage.join(tables.dead_letter, "_delta_log")):
        return dead
    streamed = (spark.read.format("delta").load(tables.dead_letter).where(F.col("phase") != "backfill")
                .select("kafka_partition", "kafka_offset"))
    return dead.join(streamed, ["kafka_partition", "kafka_offset"], "left_anti")


def _set_accounting(result: BackfillResult, per_partition: Counts) -> None:
    unbalanced = {p: a for p, a in per_partition.items() if a["read"] != a["well_formed"] + a["dead_lettered"]}
    if unbalanced:
        raise RuntimeError(f"accounting identity broken (read != well-formed + dead-lettered): {unbalanced}")
    result.accounting = per_partition
    result.records_read = sum(a["read"] for a in per_partition.values())
    result.well_formed = sum(a["well_formed"] for a in per_partition.values())
    result.dead_lettered = sum(a["dead_lettered"] for a in per_partition.values())


def _tiles_run_file(tables: Tables, handoff_id: str) -> str:
    return storage.join(tables.root, "_backfill", f"{handoff_id}.json")


def pending_tiles_run(tables: Tables) -> BackfillResult | None:
    """The latest tiles run not yet committed into state (Dagster runs tiles and state as separate steps)."""
    entries = PipelineView.read(tables).entries
    started = next((e for e in reversed(entries) if e.status == Status.BACKFILL_STARTED), None)
    if started is None or any(e.handoff_id == started.handoff_id and e.status != Status.BACKFILL_STARTED
                              for e in entries):
        return None
    saved = read_json(_tiles_run_file(tables, started.handoff_id))
    if saved is None:
        return None
    saved["first_day"], saved["last_day"] = date.fromisoformat(saved["first_day"]), date.fromisoformat(saved["last_day"])
    saved["accounting"] = {int(p): a for p, a in saved["accounting"].items()}
    return BackfillResult(**saved)
