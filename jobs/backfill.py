"""`switchyard backfill` (isBacklog = true): archive days to per-day tiles, tiles to keyed state and windows."""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import date, datetime

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from jobs.aggregation import (SORT, TILE_START, backlog_watermark, newest_event_time, state_from_partials,
                              tiles_from_events, window_end, window_partials_from_tiles)
from jobs.stream_events import dead_letter_rows, ensure_tables
from state_handoff import delta_upkeep, faults, handoff_log, storage
from state_handoff.archive_files import (ArchiveFile, archive_meta, list_archive, missing_column, recorded_ranges,
                                         unreadable)
from state_handoff.errors import UserError
from state_handoff.aggregates import partial_columns
from state_handoff.kafka_io import latest_offsets, offset_bounds
from state_handoff.kafka_security import spark_source_options
from state_handoff.step_times import StepTimes
from state_handoff.parsing import cached_for_two_passes, parse_events
from state_handoff.spec import Pipeline
from state_handoff.stream_layout import read_json, stream_dir, write_json_atomically
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


def _day(text: str | None, flag: str) -> date | None:
    if text is None:
        return None
    try:
        return date.fromisoformat(text)
    except ValueError:
        raise UserError(f"{flag} must be a date like 2026-01-31, not {text!r}") from None


def check_files(root: str, files: list[ArchiveFile], skip_bad_files: bool, out) -> tuple[list[ArchiveFile], list[str]]:
    """Every archive file is checked before anything is written (all of them give the boundary offsets);
    a bad one stops the run or, with skip_bad_files, is left out and reported with the offsets it held."""
    chosen, skipped = [], []
    for f in files:
        problem = unreadable(f.path)
        if problem:
            if not skip_bad_files:
                raise UserError(f"archive file {f.path} is not readable Parquet ({problem}): "
                                "repair or remove it, or rerun with --skip-bad-files")
            out(f"  skipping unreadable file {f.path}: {problem}; it held {_held(root, f.path)}")
            skipped.append(f.path)
            continue
        column = missing_column(f.path)
        if column:
            raise UserError(f"archive file {f.path} lacks required column {column}: rewrite it with `switchyard archive`")
        chosen.append(f)
    return chosen, skipped


def _held(root: str, path: str) -> str:
    ranges = recorded_ranges(root, [path])[path]
    if ranges is None:
        return "offsets the archive metadata does not record"
    return ", ".join(f"p{p}:{lo}..{hi} ({n} records)" for p, (lo, hi, n) in sorted(ranges.items()))


def skipped_gaps(root: str, skipped: list[str], boundary: dict[int, int]) -> list[dict]:
    """Per skipped file and partition, the offsets it held (from the archive metadata; null when not recorded)
    and whether any lies at or below the boundary, where the stream will not read them either."""
    gaps = []
    for path, ranges in recorded_ranges(root, skipped).items():
        if ranges is None:
            gaps.append({"file": path, "partition": None, "from": None, "to": None, "records": None,
                         "below_boundary": True})
            continue
        gaps.extend({"file": path, "partition": p, "from": lo, "to": hi, "records": n,
                     "below_boundary": p in boundary and lo <= boundary[p]}
                    for p, (lo, hi, n) in sorted(ranges.items()))
    return gaps


def read_archive(spark: SparkSession, tables: Tables, files: list[ArchiveFile]) -> DataFrame:
    schema = "kafka_partition INT, kafka_offset BIGINT, value BINARY, event_date DATE"
    if not files:
        return spark.createDataFrame([], schema)
    return (spark.read.option("basePath", tables.archive).parquet(*[f.path for f in files])
            .select(*ARCHIVE_COLUMNS, F.col("event_date").cast("date")))


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
    files = [f for f in list_archive(tables.archive) if unreadable(f.path) is None]
    for day in sorted({f.day for f in files}, reverse=True):
        parsed = parse_events(pipeline, read_archive(spark, tables, [f for f in files if f.day == day]))
        newest = parsed.where(F.col("error").isNull()).agg(F.max(pipeline.event_time)).first()[0]
        if newest is not None:
            return newest
    return None


def archived_boundary(spark: SparkSession, tables: Tables, readable: list[ArchiveFile]) -> dict[int, int]:
    """Per partition, the highest offset the readable archive files hold: from the ranges the archive metadata
    recorded when it wrote them, else (an archive older than those) read from the files."""
    recorded = recorded_ranges(tables.archive, [f.path for f in readable])
    if all(r is not None for r in recorded.values()):
        boundary: dict[int, int] = {}
        for ranges in recorded.values():
            for p, (_, hi, _) in ranges.items():
                boundary[p] = max(hi, boundary.get(p, hi))
        return boundary
    return {int(p): int(o) for p, o in
            read_archive(spark, tables, readable).groupBy("kafka_partition").agg(F.max("kafka_offset")).collect()}


def _delta_version(path: str) -> int:
    """The table's latest version, from its log through delta-rs (Spark's `history` is a job and a snapshot)."""
    from deltalake import DeltaTable

    return DeltaTable(path, storage_options=storage.delta_options(path)).version()


def _replace_days(df: DataFrame, path: str, first: date, last: date, condition: str = "") -> None:
    where = f"event_date >= '{first}' AND event_date <= '{last}'" + (f" AND {condition}" if condition else "")
    (df.write.format("delta").mode("overwrite").option("replaceWhere", where)
     .partitionBy("event_date").save(path))


def _resolve_range(tables: Tables, first_day: str | None, last_day: str | None):
    first, last = _day(first_day, "--from"), _day(last_day, "--to")
    files = list_archive(tables.archive)
    days = sorted({f.day for f in files})
    if not days:
        raise UserError(f"the archive at {tables.archive} holds no day folders: run `switchyard archive` first")
    first, last = first or days[0], last or days[-1]
    if first > last:
        raise UserError(f"empty date range: --from {first} is after --to {last}")
    return first, last, files, days


def backfill_tiles(spark: SparkSession, pipeline: Pipeline, tables: Tables, first_day: str | None = None,
                   last_day: str | None = None, skip_bad_files: bool = False, strategy: str = SORT,
                   out=print) -> BackfillResult:
    """Replace the tiles and dead letters of the archived days first_day..last_day (all when not given)."""
    started = time.monotonic()
    times = StepTimes(started)
    first, last, files, days = _resolve_range(tables, first_day, last_day)
    out(f"[1/5] checking {len(files)} archive files")
    readable, skipped = check_files(tables.archive, files, skip_bad_files, out)
    times.end("check")
    if not any(first <= d <= last for d in days):
        return BackfillResult(None, first, last, message=(
            f"backfill {pipeline.name}: the archive has no days between {first} and {last} "
            f"(it holds {days[0]}..{days[-1]}); nothing changed"))
    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(spark, tables, handoff_id, handoff_log.BACKFILL_STARTED,
                       details={"from": str(first), "to": str(last), "strategy": strategy})
    result = BackfillResult(handoff_id, first, last, skipped_files=skipped)
    in_range = [f for f in readable if first <= f.day <= last]
    with _failure_logged(spark, tables, handoff_id):
        # Parsing is the costly part of the scan: parse once, keep what the tiles and the dead letters read.
        parsed = cached_for_two_passes(pipeline, parse_events(pipeline, read_archive(spark, tables, in_range)))
        try:
            out(f"[2/5] sorting and aggregating {len(in_range)} files into day tiles ({strategy})")
            _replace_days(tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), strategy),
                          tables.tiles, first, last)
            times.end("parse_and_tiles")
            out("[3/5] dead-lettering malformed records")
            dead = dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), "backfill", F.col("event_date"))
            _replace_days(_not_dead_lettered_by_a_stream(spark, tables, dead), tables.dead_letter, first, last,
                          "phase = 'backfill'")
            times.end("dead_letters")
        finally:
            parsed.unpersist()
        out("[4/5] checking the accounting identity per partition")
        _set_accounting(result, accounting(spark, pipeline, tables, in_range, first, last))
        result.files = sorted(f.path for f in in_range)
        times.end("accounting")
    result.seconds = time.monotonic() - started
    result.tiles_s = times.parts
    write_json_atomically(_tiles_run_file(tables, handoff_id), asdict(result))
    faults.reach("backfill.after_tiles")
    return result


def _write_windows(pipeline: Pipeline, tables: Tables, tiles: DataFrame, watermark: datetime) -> None:
    """The windows of all tiles, split at the backlog watermark into `windows` (closed) and `window_state` (open).
    A tile lies in one window, so the tiles are split before they are aggregated: two aggregations over disjoint
    tiles, the open one small, instead of one aggregation kept on disk and read twice (a 10^7 commit's windows
    7.8 -> 5.2 s warm). Tried on a second thread beside the state's write and seed: alone 13.6 -> ~10 s of a 10^7
    commit, but with the Kafka tail the two aggregations slowed each other (the bench's commit 23.2 -> 26.9 s)."""
    closed = window_end(pipeline, F.col(TILE_START)) <= F.lit(watermark)
    for part, path in ((closed, tables.windows), (~closed, tables.window_state)):
        (window_partials_from_tiles(pipeline, tiles.where(part))
         .write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(path))


def prepare_stream(spark: SparkSession, pipeline: Pipeline, tables: Tables, handoff_id: str, state_version: int,
                   state: DataFrame):
    """What the handoff's stream would otherwise do first, done while this JVM is warm: the seed's files (`state`,
    the rows just written as `state_version`), and the tables the stream appends to. The stream checks and skips
    both."""
    from jobs.seed import seed_files

    seed_files(spark, pipeline, tables, state_version, stream_dir(tables, handoff_id) / "seed", state)
    ensure_tables(pipeline, tables)


TAIL_PHASE = "kafka-tail"


def _kafka_tail_tiles(spark: SparkSession, pipeline: Pipeline, tables: Tables, tail: KafkaTail):
    """The tail's day tiles, its dead letters (replacing what an interrupted attempt wrote from the same start,
    whatever end it had reached), and its accounting per partition (records read, parsed well-formed,
    dead-lettered) in one pass over the parsed records, kept on local disk for the tiles."""
    parsed = cached_for_two_passes(pipeline, parse_events(pipeline, kafka_range(spark, tail.bootstrap, tail.topic,
                                                                                tail.start, tail.end)))
    counts = {str(r.kafka_partition): {"read": r.read, "well_formed": r.well_formed, "dead_lettered": r.dead_lettered}
              for r in parsed.groupBy("kafka_partition").agg(
                  F.count(F.lit(1)).alias("read"), F.count_if(F.col("error").isNull()).alias("well_formed"),
                  F.count_if(F.col("error").isNotNull()).alias("dead_lettered")).collect()}
    # The tail's dead letters are few: written by delta-rs in one commit that also drops what an interrupted
    # attempt wrote (Spark's replaceWhere write cost a snapshot, a job and a commit, ~2 s of a 10^7 bench).
    from deltalake import DeltaTable, write_deltalake

    dead = dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), TAIL_PHASE).toArrow()
    anywhere_in_tail = " OR ".join(f"(kafka_partition = {p} AND kafka_offset >= {tail.start.get(p, 0)})"
                                   for p in sorted(tail.end))
    ensure_tables(pipeline, tables)
    table = DeltaTable(tables.dead_letter, storage_options=storage.delta_options(tables.dead_letter))
    schema = pa.schema(table.schema())
    write_deltalake(table, dead.select(schema.names).cast(schema), mode="overwrite",
                    predicate=f"phase = '{TAIL_PHASE}' AND ({anywhere_in_tail or 'false'})")
    # kept too: the state and both window tables read the tail's tiles (its sort and aggregation done once)
    tiles = tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), SORT).persist(StorageLevel.DISK_ONLY)
    return parsed, tiles, dict(sorted(counts.items()))


def _not_dead_lettered_by_a_stream(spark: SparkSession, tables: Tables, dead: DataFrame) -> DataFrame:
    """Archived records a stream dead-lettered already (before the archive grew over them) stay its own:
    a record is in `dead_letter` once."""
    from delta.tables import DeltaTable

    if not DeltaTable.isDeltaTable(spark, tables.dead_letter):
        return dead
    streamed = (spark.read.format("delta").load(tables.dead_letter).where(F.col("phase") != "backfill")
                .select("kafka_partition", "kafka_offset"))
    return dead.join(streamed, ["kafka_partition", "kafka_offset"], "left_anti")


def _tiles_run_file(tables: Tables, handoff_id: str) -> str:
    return storage.join(tables.root, "_backfill", f"{handoff_id}.json")


def pending_tiles_run(tables: Tables) -> BackfillResult | None:
    """The latest tiles run not yet committed into state (Dagster runs tiles and state as separate steps)."""
    entries = handoff_log.entries(None, tables)
    started = next((e for e in reversed(entries) if e.status == handoff_log.BACKFILL_STARTED), None)
    if started is None or any(e.handoff_id == started.handoff_id and e.status != handoff_log.BACKFILL_STARTED
                              for e in entries):
        return None
    saved = read_json(_tiles_run_file(tables, started.handoff_id))
    if saved is None:
        return None
    saved["first_day"], saved["last_day"] = date.fromisoformat(saved["first_day"]), date.fromisoformat(saved["last_day"])
    saved["accounting"] = {int(p): a for p, a in saved["accounting"].items()}
    return BackfillResult(**saved)


@dataclass
class KafkaTail:
    """The backlog's second input (DESIGN: "or a bounded Kafka offset range read in batch"): the topic's
    records after the archive's cut, up to `end` (exclusive, per partition), aggregated sort-based with the
    archived ones. The handoff then starts the stream at `end`, so the stream's first batch carries the seed
    and no backlog: what micro-batches would do with window MERGEs and state upserts, one batch pass does.
    Like the archive, the tail is backlog: none of it is late, the backlog watermark covers it."""

    bootstrap: str
    topic: str
    start: dict[int, int]
    end: dict[int, int]

    @property
    def records(self) -> int:
        return sum(max(0, o - self.start.get(p, 0)) for p, o in self.end.items())

    def as_details(self) -> dict:
        return {"topic": self.topic, "from": {str(p): o for p, o in sorted(self.start.items())},
                "to": {str(p): o for p, o in sorted(self.end.items())}}


def kafka_tail_to_latest(tables: Tables, bootstrap: str) -> KafkaTail:
    """The tail from the archive's cut to the topic's end now."""
    meta = archive_meta(tables.archive)
    start = {int(p): int(o) for p, o in meta["cut"].items()}
    latest = latest_offsets(bootstrap, [meta["topic"]])[meta["topic"]]
    return KafkaTail(bootstrap, meta["topic"], start, {p: max(o, start.get(p, 0)) for p, o in latest.items()})


@dataclass
class AtCut:
    """A backfill under a stream's history (jobs/rebase.py): the backlog ends at a cut, not at the archive's end.

    The Kafka range past the archive's cut arrives as keyed partials; the windows, late records and dead
    letters stay as the stream made them (a final window is never re-emitted, a late record never joins a
    window); the recomputed keyed state is compared with the streamed state at the same cut before it
    replaces it."""

    cut: dict[int, int]                 # per partition, the first offset the next handoff streams
    kafka_partials: DataFrame           # keyed partials of the well-formed records in [archive cut, cut)
    streamed: DataFrame                 # the streamed keyed state at the cut
    watermark: datetime | None          # the stream's watermark at the cut
    details: dict = field(default_factory=dict)
    reconciliation: dict = field(default_factory=dict)


def commit_state(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiles_run: BackfillResult | None = None,
                 out=print, at_cut: AtCut | None = None, kafka_tail_from: str | None = None) -> BackfillResult:
    """Merge every tile into keyed state and windows and append BACKFILL_COMMITTED (isBacklog ends here).
    `kafka_tail_from` (a bootstrap): fold the archived topic's records up to its end into the backlog too."""
    started = time.monotonic()
    times = StepTimes(started)  # where the commit's seconds go: BACKFILL_COMMITTED's commit_s
    first, last, files, _ = _resolve_range(tables, None, None)
    # the files this process's tiles run read a moment ago are not opened again (32 at 10^7: 0.14-0.23 s); a tiles
    # run loaded from its record (a separate step, maybe hours ago) checks every file again
    just_read = set(tiles_run.files) if tiles_run is not None else set()
    readable = [f for f in files if f.path in just_read or unreadable(f.path) is None]
    run = tiles_run or pending_tiles_run(tables) or BackfillResult(handoff_log.new_handoff_id(), first, last)
    tail = tail_parsed = None
    with _failure_logged(spark, tables, run.handoff_id):
        tiles = spark.read.format("delta").load(tables.tiles)
        if kafka_tail_from is not None and at_cut is None:
            tail = kafka_tail_to_latest(tables, kafka_tail_from)
            out(f"[5/5] reading the Kafka tail of {tail.topic} in batch ({tail.records:,} records: "
                + ", ".join(f"p{p}:{tail.start.get(p, 0)}..{o}" for p, o in sorted(tail.end.items())) + ")")
            tail_parsed, tail_tiles, tail_accounting = _kafka_tail_tiles(spark, pipeline, tables, tail)
            run.kafka_tail = {**tail.as_details(), "records": tail.records, "accounting": tail_accounting}
            tiles = tiles.unionByName(tail_tiles)
            times.end("kafka_tail")
        out("[5/5] merging all tiles into keyed state" + (" at the cut" if at_cut else " and windows"))
        partials = tiles
        if at_cut is not None:
            columns = [pipeline.key, *partial_columns(pipeline.aggregations, keyed=True)]
            partials = tiles.select(*columns).unionByName(at_cut.kafka_partials.select(*columns))
        # kept (one row per key, on local disk) for what follows the write: the watermark, the seed, the keys
        state = state_from_partials(pipeline, partials).persist(StorageLevel.DISK_ONLY)
        if at_cut is not None:
            at_cut.reconciliation = reconcile(pipeline, state, at_cut.streamed)
        state.write.format("delta").mode("overwrite").option("overwriteSchema", "true").save(tables.state)
        state_version = _delta_version(tables.state)
        times.end("state")
        watermark = at_cut.watermark if at_cut is not None else backlog_watermark(pipeline, newest_event_time(state))
        times.end("watermark")
        prepare_stream(spark, pipeline, tables, run.handoff_id, state_version, state)
        times.end("seed_and_stream_tables")
        if pipeline.windows is not None and at_cut is None:
            _write_windows(pipeline, tables, tiles, watermark)
        times.end("windows")
        boundary = ({p: o - 1 for p, o in at_cut.cut.items()} if at_cut is not None
                    else archived_boundary(spark, tables, readable))
        if tail is not None:
            boundary.update({p: o - 1 for p, o in tail.end.items() if o > tail.start.get(p, 0)})
            tail_parsed.unpersist()
            tail_tiles.unpersist()
        # The tiles run's own count when it covered exactly the archive's readable files (a backfill of every day
        # since nothing changed): the archive read a third time would give the same figures.
        whole = ({p: dict(a) for p, a in run.accounting.items()} if run.files and run.accounting
                 and run.files == sorted(f.path for f in readable) and at_cut is None
                 else accounting(spark, pipeline, tables, readable, first, last))
        times.end("boundary_and_accounting")
        missing = {p: a["read"] - a["well_formed"] - a["dead_lettered"] for p, a in whole.items()
                   if a["read"] != a["well_formed"] + a["dead_lettered"]}
        keys = state.count()
        state.unpersist()
        gaps = skipped_gaps(tables.archive, [f.path for f in files if f not in readable], boundary)
        times.end("keys_and_gaps")
    result = replace(run, keys=keys, state_version=state_version, backlog_watermark=watermark, boundary=boundary,
                     seconds=run.seconds + time.monotonic() - started)
    faults.reach("backfill.after_state")
    handoff_log.append(spark, tables, run.handoff_id, handoff_log.BACKFILL_COMMITTED,
                       state_version=state_version, backlog_watermark=watermark,
                       details={"from": str(run.first_day), "to": str(run.last_day), "boundary": boundary,
                                "records_read": run.records_read, "well_formed": run.well_formed,
                                "dead_lettered": run.dead_lettered, "keys": keys, "accounting": run.accounting,
                                "archive_accounting": whole,
                                "complete": not missing and not any(g["below_boundary"] for g in gaps),
                                "records_not_backfilled": missing,
                                "unreadable_files": [f.path for f in files if f not in readable],
                                "skipped_files": run.skipped_files, "gaps": gaps,
                                "tiled_files": [] if missing else sorted(
                                    storage.relative(f.path, tables.archive) for f in readable),
                                "duration_s": round(result.seconds, 3), "tiles_s": run.tiles_s,
                                "commit_s": times.parts,
                                **({"kafka_tail": run.kafka_tail} if tail is not None else {}),
                                **({"at_cut": {**at_cut.details, "cut": at_cut.cut,
                                               "reconciliation": at_cut.reconciliation}} if at_cut else {})})
    for path in (tables.tiles, tables.state, tables.windows, tables.window_state, tables.dead_letter):
        delta_upkeep.vacuum(path)  # what this commit and earlier backfills replaced, over an hour ago
    if missing:
        out(f"  note: archived records not yet in the tiles, per partition: {missing}; "
            "backfill the remaining days before the handoff")
    for g in (g for g in gaps if g["below_boundary"]):
        held = "offsets not recorded" if g["from"] is None else f"p{g['partition']}:{g['from']}..{g['to']}"
        out(f"  note: skipped file {g['file']} holds {held} below the boundary; the handoff will refuse "
            "until the file is restored or rewritten and the backfill rerun")
    return result


def run_backfill(spark: SparkSession, pipeline: Pipeline, tables: Tables, first_day: str | None = None,
                 last_day: str | None = None, skip_bad_files: bool = False, strategy: str = SORT,
                 out=print, kafka_tail_from: str | None = None) -> BackfillResult:
    """`switchyard backfill`: the day tiles of a range, then the state over all tiles (and, given
    `kafka_tail_from`, the archived topic's records after the archive up to the topic's end)."""
    tiles_run = backfill_tiles(spark, pipeline, tables, first_day, last_day, skip_bad_files, strategy, out)
    if tiles_run.handoff_id is None:
        return tiles_run
    return commit_state(spark, pipeline, tables, tiles_run, out, kafka_tail_from=kafka_tail_from)


def reconcile(pipeline: Pipeline, recomputed: DataFrame, streamed: DataFrame, examples: int = 5) -> dict:
    """How many keys' recomputed state differs from the streamed state (expected 0), with a few examples.
    Doubles compare to 1e-9 relative: the two phases add the same values in different orders."""
    key = pipeline.key
    columns = partial_columns(pipeline.aggregations, keyed=True)
    types = dict(recomputed.dtypes)
    r, s = F.col("r.__present"), F.col("s.__present")
    differs = r.isNull() | s.isNull()
    for c in columns:
        a, b = F.col(f"r.`{c}`"), F.col(f"s.`{c}`")
        if types[c] in ("double", "float"):
            tolerance = F.greatest(F.lit(1.0), F.abs(a), F.abs(b)) * F.lit(1e-9)
            differs = differs | ~(a.eqNullSafe(b) | (F.abs(a - b) <= tolerance))
        else:
            differs = differs | ~a.eqNullSafe(b)
    joined = (recomputed.withColumn("__present", F.lit(True)).alias("r")
              .join(streamed.select(key, *columns).withColumn("__present", F.lit(True)).alias("s"),
                    F.col(f"r.`{key}`") == F.col(f"s.`{key}`"), "full_outer")
              .where(differs)
              .select(F.coalesce(F.col(f"r.`{key}`"), F.col(f"s.`{key}`")).alias("key"),
                      F.to_json(F.struct(*[F.col(f"r.`{c}`").alias(c) for c in columns])).alias("recomputed"),
                      F.to_json(F.struct(*[F.col(f"s.`{c}`").alias(c) for c in columns])).alias("streamed"))
              .persist(StorageLevel.DISK_ONLY))
    try:
        different = joined.count()
        shown = [row.asDict() for row in joined.limit(examples).collect()] if different else []
    finally:
        joined.unpersist()
    return {"keys_different": different, "keys_recomputed": recomputed.count(), "examples": shown}


@contextmanager
def _failure_logged(spark: SparkSession, tables: Tables, handoff_id: str):
    """A run that dies appends FAILED with the reason; committed entries and tables stay as they were."""
    try:
        yield
    except Exception as err:
        handoff_log.append(spark, tables, handoff_id, handoff_log.FAILED,
                           details={"phase": "backfill", "reason": str(err).strip().splitlines()[0][:500]})
        raise


def _set_accounting(result: BackfillResult, per_partition: dict[int, dict[str, int]]) -> None:
    unbalanced = {p: a for p, a in per_partition.items() if a["read"] != a["well_formed"] + a["dead_lettered"]}
    if unbalanced:
        raise RuntimeError(f"accounting identity broken (read != well-formed + dead-lettered): {unbalanced}")
    result.accounting = per_partition
    result.records_read = sum(a["read"] for a in per_partition.values())
    result.well_formed = sum(a["well_formed"] for a in per_partition.values())
    result.dead_lettered = sum(a["dead_lettered"] for a in per_partition.values())


def accounting(spark: SparkSession, pipeline: Pipeline, tables: Tables, files: list[ArchiveFile],
               first: date, last: date) -> dict[int, dict[str, int]]:
    """Per Kafka partition over the days: records read, well-formed (aggregated into tiles), dead-lettered.

    Counted from three independent places (the archive, tiles, dead_letter) so a lost record shows. When the
    archive metadata says the files hold every offset of a range per partition (each file's count recorded at
    archive time, adding up to the range's length), the archive's counts and the range come from there: an archived
    record is dead-lettered when its offset is in `dead_letter` and in the range, and the archive is not scanned.
    Otherwise (some days only, a skipped file, an archive older than the recorded ranges) the files are read.
    """
    spans = dense_spans(recorded_ranges(tables.archive, [f.path for f in files]))
    if spans is not None and pipeline.count_column:
        return _accounting_from_delta(pipeline, tables, spans, first, last)
    days = (F.col("event_date") >= F.lit(first)) & (F.col("event_date") <= F.lit(last))
    count_col = pipeline.count_column
    tiles = spark.read.format("delta").load(tables.tiles).where(days)
    well_formed = (tiles.groupBy("kafka_partition").agg(F.sum(count_col)) if count_col else
                   parse_events(pipeline, read_archive(spark, tables, files)).where("error IS NULL")
                   .groupBy("kafka_partition").count())
    # whichever phase dead-lettered an archived record (the backfill, or a stream before the archive grew)
    dead_letters = (spark.read.format("delta").load(tables.dead_letter)
                    .select("kafka_partition", "kafka_offset").distinct())
    if spans is not None:
        read = [(p, n) for p, (_, _, n) in spans.items()]
        in_spans = F.lit(False)
        for p, (lo, hi, _) in spans.items():
            in_spans = in_spans | ((F.col("kafka_partition") == p) & F.col("kafka_offset").between(lo, hi))
        dead = dead_letters.where(in_spans).groupBy("kafka_partition").count()
    else:
        archived = read_archive(spark, tables, files)
        # the dead letters, few, on the join's build side, so the archive's offsets are scanned, never shuffled
        dead = (archived.select("kafka_partition", "kafka_offset")
                .join(dead_letters, ["kafka_partition", "kafka_offset"], "inner").groupBy("kafka_partition").count())
        read = archived.groupBy("kafka_partition").count().collect()
    counts: dict[int, dict[str, int]] = {}
    for name, rows in (("read", read), ("well_formed", well_formed.collect()), ("dead_lettered", dead.collect())):
        for partition, n in rows:
            counts.setdefault(int(partition), {"read": 0, "well_formed": 0, "dead_lettered": 0})[name] = int(n)
    return dict(sorted(counts.items()))


def _accounting_from_delta(pipeline: Pipeline, tables: Tables, spans: dict[int, tuple[int, int, int]],
                           first: date, last: date) -> dict[int, dict[str, int]]:
    """`accounting` when the archive metadata gives the records read: the well-formed from the tiles' count column
    and the dead-lettered from `dead_letter`, each summed by delta-rs's engine in this process. Two small Spark
    jobs (plans, a Delta snapshot each, their stages) cost ~4.6 s of a 10^7 backfill; these cost a fraction."""
    from deltalake import DeltaTable, QueryBuilder

    def rows(uri: str, sql: str) -> list[tuple[int, int]]:
        if not storage.exists(storage.join(uri, "_delta_log")):
            return []
        query = QueryBuilder().register("t", DeltaTable(uri, storage_options=storage.delta_options(uri)))
        data = pa.table(query.execute(sql).read_all())
        return list(zip(data.column(0).to_pylist(), data.column(1).to_pylist()))

    in_spans = " OR ".join(f"(kafka_partition = {p} AND kafka_offset BETWEEN {lo} AND {hi})"
                           for p, (lo, hi, _) in sorted(spans.items()))
    well_formed = rows(tables.tiles, f'SELECT kafka_partition, SUM("{pipeline.count_column}") FROM t '
                                     f"WHERE event_date >= DATE '{first}' AND event_date <= DATE '{last}' "
                                     "GROUP BY kafka_partition")
    # whichever phase dead-lettered an archived record (the backfill, or a stream before the archive grew)
    dead = rows(tables.dead_letter, "SELECT kafka_partition, COUNT(*) FROM (SELECT DISTINCT kafka_partition, "
                                    f"kafka_offset FROM t WHERE {in_spans or 'false'}) GROUP BY kafka_partition")
    counts = {p: {"read": n, "well_formed": 0, "dead_lettered": 0} for p, (_, _, n) in spans.items()}
    for name, found in (("well_formed", well_formed), ("dead_lettered", dead)):
        for partition, n in found:
            counts.setdefault(int(partition), {"read": 0, "well_formed": 0, "dead_lettered": 0})[name] = int(n or 0)
    return dict(sorted(counts.items()))


def dense_spans(recorded: dict[str, dict[int, tuple[int, int, int]] | None]) -> dict[int, tuple[int, int, int]] | None:
    """Per partition (lowest offset, highest, records) over the files, when the files' recorded counts add up to
    every offset between the two; None when a file's ranges were not recorded or some partition has a gap."""
    if not recorded or any(ranges is None for ranges in recorded.values()):
        return None
    spans: dict[int, tuple[int, int, int]] = {}
    for ranges in recorded.values():
        for p, (lo, hi, n) in ranges.items():
            if p in spans:
                lo, hi, n = min(lo, spans[p][0]), max(hi, spans[p][1]), n + spans[p][2]
            spans[p] = (lo, hi, n)
    if any(n != hi - lo + 1 for lo, hi, n in spans.values()):
        return None
    return spans
