"""The Kafka tail: the archived topic's records after the archive's cut up to the topic's end, read in batch and
folded into the backlog by the commit."""

from __future__ import annotations

from dataclasses import dataclass

from pyspark import StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import SORT, tiles_from_events
from switchyard.jobs.backfill.read import kafka_range
from switchyard.jobs.sinks import conformed, dead_letter_rows, ensure_tables
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.io.archive_files import archive_meta
from switchyard.state_handoff.io.kafka_io import latest_offsets
from switchyard.state_handoff.language.parsing import cached_for_two_passes, parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

TAIL_PHASE = "kafka-tail"


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


def kafka_tail_tiles(spark: SparkSession, pipeline: Pipeline, tables: Tables,
                     tail: KafkaTail) -> tuple[DataFrame, DataFrame, dict[str, dict[str, int]]]:
    """The tail's day tiles, its dead letters (replacing what an interrupted attempt wrote from the same start,
    whatever end it had reached), and its accounting per partition (records read, parsed well-formed,
    dead-lettered) in one pass over the parsed records, kept on local disk for the tiles. The caller unpersists
    the parsed records and the tiles it returns."""
    parsed = cached_for_two_passes(pipeline, parse_events(pipeline, kafka_range(spark, tail.bootstrap, tail.topic,
                                                                                tail.start, tail.end)))
    counts = {str(r.kafka_partition): {"read": r.read, "well_formed": r.well_formed, "dead_lettered": r.dead_lettered}
              for r in parsed.groupBy("kafka_partition").agg(
                  F.count(F.lit(1)).alias("read"), F.count_if(F.col("error").isNull()).alias("well_formed"),
                  F.count_if(F.col("error").isNotNull()).alias("dead_lettered")).collect()}
    # The tail's dead letters, written by the executors (their values never reach the driver), in one commit that
    # also drops what an interrupted attempt wrote from the same start
    dead = dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), TAIL_PHASE)
    anywhere_in_tail = " OR ".join(f"(kafka_partition = {p} AND kafka_offset >= {tail.start.get(p, 0)})"
                                   for p in sorted(tail.end))
    ensure_tables(pipeline, tables)
    dead = conformed(dead, spark.read.format("delta").load(tables.dead_letter).schema)
    (dead.write.format("delta").mode("overwrite")
     .option("replaceWhere", f"phase = '{TAIL_PHASE}' AND ({anywhere_in_tail or 'false'})")
     .options(**fencing.spark_options(tables.dead_letter)).save(tables.dead_letter))
    # kept too: the state and both window tables read the tail's tiles (its sort and aggregation done once)
    tiles = tiles_from_events(pipeline, parsed.where(F.col("error").isNull()), SORT).persist(StorageLevel.DISK_ONLY)
    return parsed, tiles, dict(sorted(counts.items()))


@dataclass(frozen=True)
class TailTiles:
    """The tail a commit folds in, read: its parsed records and tiles (kept on local disk until `unpersist`), and its
    accounting per partition."""

    tail: KafkaTail
    parsed: DataFrame
    tiles: DataFrame
    accounting: dict[str, dict[str, int]]

    def as_details(self) -> dict:
        """What BACKFILL_COMMITTED records of the tail (`kafka_tail`)."""
        return {**self.tail.as_details(), "records": self.tail.records, "accounting": self.accounting}

    @property
    def boundary(self) -> dict[int, int]:
        """Per partition the tail holds records of, the highest offset it read."""
        return {p: o - 1 for p, o in self.tail.end.items() if o > self.tail.start.get(p, 0)}

    def unpersist(self) -> None:
        self.parsed.unpersist()
        self.tiles.unpersist()


def read_tail(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, out) -> TailTiles:
    """The tail up to the topic's end now, read in batch into tiles and dead letters (kafka_tail_tiles)."""
    tail = kafka_tail_to_latest(tables, bootstrap)
    out(f"[5/5] reading the Kafka tail of {tail.topic} in batch ({tail.records:,} records: "
        + ", ".join(f"p{p}:{tail.start.get(p, 0)}..{o}" for p, o in sorted(tail.end.items())) + ")")
    return TailTiles(tail, *kafka_tail_tiles(spark, pipeline, tables, tail))
