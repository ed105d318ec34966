"""`switchyard archive`: a Spark batch read of a topic up to a cut into Parquet day folders (stands in for a Kafka-to-files sink).

The run holds the pipeline's lease (the command takes it): only one writer touches the archive at a time, so a
run never removes as orphans the files another run is about to commit."""

from __future__ import annotations

import json
import logging
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff.control.lease import Lease
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import (commit_record, file_ranges, files_on_disk, orphan_files,
                                                       read_record, record_uri, remove_files)
from switchyard.state_handoff.io.archive_record import check_record, file_totals
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.io.kafka_security import spark_source_options
from switchyard.state_handoff.language.parsing import EPOCH, parse_events, within
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


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


def _offsets(lo: int, end: int) -> str:
    """An exclusive-end range as people read it: first..last offset."""
    return f"{lo}..{end - 1}"


def plan_archive(pipeline: str, previous_cut: dict[int, int], requested: dict[int, tuple[int, int]]
                 ) -> tuple[dict[int, tuple[int, int]], list[str]]:
    """Per partition, the range to write so the archive grows from its previous cut, and what was trimmed.

    [a, b) then [b, c) archives what [a, c) does: a requested range starting below the cut is trimmed to it; one
    starting above it would leave a hole and is refused."""
    holes = [(p, previous_cut[p], lo) for p, (lo, _) in sorted(requested.items())
             if p in previous_cut and lo > previous_cut[p]]
    if holes:
        p, cut, lo = holes[0]
        raise UserError(f"archive {pipeline}: this run would leave offsets {_offsets(cut, lo)} of partition {p} "
                        f"unarchived: archive from the current cut, p{p}:{cut} (--until-offsets / --fraction apply "
                        "from there)")
    to_write, trimmed = {}, []
    for p, (lo, end) in sorted(requested.items()):
        start = max(lo, previous_cut.get(p, lo))
        if start > lo and end > lo:
            rest = f"archiving {_offsets(start, end)}" if end > start else "nothing to archive"
            trimmed.append(f"archive {pipeline}: p{p} offsets {_offsets(lo, min(start, end))} are archived already; "
                           + rest)
        to_write[p] = (start, max(start, end))
    return to_write, trimmed


def _previous(root: str, topic: str) -> tuple[int, dict]:
    """The archive's record so far ({} when there is none) and the version it was read at, refusing another topic."""
    version, meta = read_record(root)
    if meta is None:
        return version, {}
    if meta["topic"] != topic:
        raise UserError(f"the archive at {root} holds topic {meta['topic']}, not {topic}: "
                        "archive another topic into another --warehouse")
    return version, meta


def _by_partition(ranges: dict) -> dict[int, int]:
    return {int(p): int(o) for p, o in ranges.items()}


def _per_partition(ranges: dict[int, int]) -> str:
    return ", ".join(f"p{p}:{o}" for p, o in sorted(ranges.items()))


def _commit(root: str, version: int, meta: dict, lease: Lease | None) -> None:
    """Commit the record by compare-and-swap on the version this run planned from, unless the lease was lost (the
    commit is fenced by it): when another commit came first, nothing is committed and this run's files stay orphans
    for the next run."""
    if lease is not None:
        lease.check_fresh()
    if not commit_record(root, meta, version):
        raise UserError(f"the archive record {record_uri(root)} changed while this run wrote its files (another "
                        "archive run without the lease?): nothing committed; run the archive again")


def prepare(pipeline: Pipeline, root: str, topic: str, cut: dict[int, tuple[int, int]], lease: Lease | None,
            out) -> tuple[int, dict, dict, dict[int, tuple[int, int]]]:
    """Before an archive run writes: its record checked (the version read, the record, its files' ranges), the
    files an interrupted run left removed, and per partition the range to write from the previous cut to `cut`."""
    version, previous = _previous(root, topic)
    if previous:
        check_record(root, previous)
    if lease is not None:
        lease.check()
    orphans = orphan_files(root)
    if orphans:
        warnings_to(out)(f"archive {pipeline.name}: removing {len(orphans)} file{'s' * (len(orphans) != 1)} an "
                         "interrupted archive run left uncommitted")
        remove_files(orphans)
    to_write, trimmed = plan_archive(pipeline.name, _by_partition(previous.get("cut", {})), cut)
    for line in trimmed:
        out(line)
    return version, previous, dict(previous.get("files", {})), to_write


def run_archive(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, topic: str,
                cut: dict[int, tuple[int, int]], out=logger.info, lease: Lease | None = None) -> str:
    """Grow the archive from its previous cut to `cut`'s ends; the metadata, written last, commits the new files.
    `lease`: the pipeline's lease this run holds, checked before it removes orphans and before it commits."""
    started = time.monotonic()
    root = tables.archive
    version, previous, committed, to_write = prepare(pipeline, root, topic, cut, lease, out)
    reading = {p: r for p, r in to_write.items() if r[1] > r[0]}
    if not reading:
        return (f"archive {pipeline.name}: {topic} is archived up to {_per_partition(_by_partition(previous['cut']))} "
                "already; nothing written")
    out(f"archive {pipeline.name}: reading {topic} offsets "
        + ", ".join(f"p{p}:{lo}..{hi}" for p, (lo, hi) in sorted(reading.items())))
    records = (spark.read.format("kafka").options(**spark_source_options(bootstrap))
               .option("assign", json.dumps({topic: sorted(reading)}))
               .option("startingOffsets", json.dumps({topic: {str(p): lo for p, (lo, _) in reading.items()}}))
               .option("endingOffsets", json.dumps({topic: {str(p): hi for p, (_, hi) in reading.items()}}))
               .option("failOnDataLoss", "true")
               .load()
               .select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"),
                       F.col("timestamp").alias("kafka_timestamp"), F.col("key").alias("kafka_key"), "value"))
    ends, total = write_and_commit(root, version, previous, committed, to_write, topic,
                                   archived_dates(pipeline, parse_events(pipeline, records)), lease)
    seconds = time.monotonic() - started
    return (f"archive {pipeline.name}: {total} records from {topic} into {root} in {seconds:.1f}s "
            f"({total / max(seconds, 1e-9):,.0f} records/s); the archive now ends at {_per_partition(ends)}")


def archived_dates(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """The archive's columns, each record in the day folder of its event time (or, without one, of its Kafka
    timestamp; of 1970-01-01 when that too is outside the accepted event times): every folder a day that reads
    back as written."""
    kafka_day = F.when(within(pipeline, F.col("kafka_timestamp")), F.to_date("kafka_timestamp"))
    event_date = F.coalesce(F.to_date(pipeline.event_time), kafka_day, F.lit(EPOCH.date()))
    return parsed.select("kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "value",
                         event_date.alias("event_date"))


def write_and_commit(root: str, version: int, previous: dict, committed: dict, to_write: dict[int, tuple[int, int]],
                     topic: str, archived: DataFrame, lease: Lease | None,
                     source: dict | None = None) -> tuple[dict[int, int], int]:
    """Write `archived` (the records of the ranges `to_write`, with their day) as new day folders and commit them in
    the record: the new cut and first offsets, the files' ranges, the run. Returns the cut and how many records
    were written."""
    reading = {p: r for p, r in to_write.items() if r[1] > r[0]}
    before = {f.path for f in files_on_disk(root)}
    # Spark names appended files uniquely; until the record below names them, readers do not see them.
    archived.write.mode("append").partitionBy("event_date").parquet(root)
    written = file_ranges(root, [f.path for f in files_on_disk(root) if f.path not in before])
    total = sum(n for ranges in written.values() for _, _, n in ranges.values())
    ends = {**_by_partition(previous.get("cut", {})), **{p: hi for p, (_, hi) in to_write.items()}}
    firsts = {p: lo for p, (lo, _) in to_write.items()} | _by_partition(previous.get("first", {}))
    wrote = file_totals(written)
    run = {"from": {str(p): lo for p, (lo, _) in sorted(reading.items())},
           "to": {str(p): hi for p, (_, hi) in sorted(reading.items())},
           "records": {str(p): wrote.get(p, 0) for p in sorted(reading)}, **(source or {})}
    runs = previous.get("runs", [])
    _commit(root, version, {**previous, "topic": topic,
                             "cut": {str(p): o for p, o in sorted(ends.items())},
                             "first": {str(p): o for p, o in sorted(firsts.items())},
                             "records": previous.get("records", 0) + total, "files": {**committed, **written},
                             "runs": [*runs, run]}, lease)
    return ends, total
