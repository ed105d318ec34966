"""The accounting identity per Kafka partition: every archived record read is either well-formed (in the tiles)
or dead-lettered, counted from three independent places so a lost record shows."""

from __future__ import annotations

from datetime import date

import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.backfill.read import read_archive
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.archive_files import ArchiveFile, ArchiveListing
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

Counts = dict[int, dict[str, int]]  # per partition: read, well_formed, dead_lettered


def archive_accounting(spark: SparkSession, pipeline: Pipeline, tables: Tables, archive: ArchiveListing,
                       files: list[ArchiveFile], first: date, last: date) -> Counts:
    """Per Kafka partition over the days: records read, well-formed (aggregated into tiles), dead-lettered.

    Counted from three independent places (the archive, tiles, dead_letter) so a lost record shows. When the
    archive metadata says the files hold every offset of a range per partition (each file's count recorded at
    archive time, adding up to the range's length), the archive's counts and the range come from there: an archived
    record is dead-lettered when its offset is in `dead_letter` and in the range, and the archive is not scanned.
    Otherwise (some days only, a skipped file) the files are read.
    """
    spans = dense_spans(archive.recorded_ranges([f.path for f in files]))
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
    counts: Counts = {}
    for name, rows in (("read", read), ("well_formed", well_formed.collect()), ("dead_lettered", dead.collect())):
        for partition, n in rows:
            counts.setdefault(int(partition), {"read": 0, "well_formed": 0, "dead_lettered": 0})[name] = int(n)
    return dict(sorted(counts.items()))


def _accounting_from_delta(pipeline: Pipeline, tables: Tables, spans: dict[int, tuple[int, int, int]],
                           first: date, last: date) -> Counts:
    """`archive_accounting` when the archive metadata gives the records read: the well-formed from the tiles'
    count column and the dead-lettered from `dead_letter`, each summed by delta-rs's engine in this process,
    where Spark would plan two small jobs, each with a Delta snapshot and its stages."""
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


def dense_spans(recorded: dict[str, dict[int, tuple[int, int, int]]]) -> dict[int, tuple[int, int, int]] | None:
    """Per partition (lowest offset, highest, records) over the files, when the files' recorded counts add up to
    every offset between the two; None when there are no files or some partition has a gap."""
    if not recorded:
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



def check_against_record(archive: ArchiveListing, files: list[ArchiveFile], counts: Counts) -> None:
    """Raise UserError when, per partition, the records read (and those found well-formed or dead-lettered) are not
    what the archive record says `files` hold: a file replaced or rewritten after it was archived."""
    recorded = archive.recorded_ranges([f.path for f in files])
    held: dict[int, int] = {}
    for ranges in recorded.values():
        for p, (_, _, n) in ranges.items():
            held[p] = held.get(p, 0) + n
    for p in sorted(set(held) | set(counts)):
        got = counts.get(p, {"read": 0, "well_formed": 0, "dead_lettered": 0})
        found = got["well_formed"] + got["dead_lettered"]
        if got["read"] != held.get(p, 0) or found != held.get(p, 0):
            raise UserError(f"archive {archive.root}: the archive record says its files hold {held.get(p, 0)} records "
                            f"of partition {p}, the backfill read {got['read']} ({found} well-formed or "
                            "dead-lettered): a file was replaced after it was archived; restore it, or archive the "
                            "topic again into a fresh --warehouse")
