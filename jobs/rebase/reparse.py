"""A redeploy whose records parse otherwise (its input format, fields or event time changed: definition.REPARSED):
the dead letters made again over all history at the cut, so that `dead_letter` holds exactly the records the changed
definition finds malformed, every one of [0, cut) once.

Records move both ways: a field made required dead-letters records the recorded definition aggregated; a fixed
field takes in records it dead-lettered. So nothing of the recorded `dead_letter` is kept:
1. beside the live stream, the archive's parse that tiles every day (jobs/rebase/beside.py) also writes its dead
   letters into `redeploy_dead_letter`;
2. at the cut, before any day is tiled there, every dead letter of an archived record (any phase: a stream's too,
   of a record archived since) is replaced in one commit by those made beside, or dropped when every day is tiled at
   the cut, whose tiles run writes them; the days archived since the pass beside are tiled at the cut with theirs;
3. past the archive, the events path's catch-up writes [E, C) as the stream would, under the changed definition;
   then [archive cut, E), which the recorded definition's stream dead-lettered, is parsed again in batch and its
   dead letters replace that range's in one commit (`remake_past_archive`), with its accounting.
The commit then counts the archive's records against `tiles` and `dead_letter` (the accounting identity); the
reconciliation compares nothing (the two states hold other records). Steps 2 and 3 replace what they cover, so a
rerun at the same cut writes the same rows; `switchyard rebase --abandon` before the catch-up restores `dead_letter`
to its version at the request (jobs/rebase/requests.py)."""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.backfill.backlog import table_version
from switchyard.jobs.backfill.read import kafka_range
from switchyard.jobs.sinks import conformed, dead_letter_rows
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.language.parsing import cached_for_two_passes, parse_events
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

TABLE = "redeploy_dead_letter"
PHASE = "redeploy"  # the dead letters of [archive cut, E) made again at the cut


def dead_letters_beside(pipeline: Pipeline, tables: Tables, parsed: DataFrame) -> int:
    """Step 1: the archive's malformed records under `pipeline` (of its `parsed` records) into `redeploy_dead_letter`,
    replacing what it held; returns the table's version."""
    rows = dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), "backfill", F.col("event_date"))
    (rows.write.format("delta").mode("overwrite").option("overwriteSchema", "true").partitionBy("event_date")
     .save(tables.path(TABLE)))
    return table_version(tables.path(TABLE))


def _offsets(bounds: dict[int, tuple[int, int]]) -> str:
    """A replaceWhere over the offsets [lo, hi) of each partition."""
    return " OR ".join(f"(kafka_partition = {p} AND kafka_offset >= {lo} AND kafka_offset < {hi})"
                       for p, (lo, hi) in sorted(bounds.items()) if hi > lo) or "false"


def _replace(spark: SparkSession, tables: Tables, rows: DataFrame | None, where: str) -> None:
    held = spark.read.format("delta").load(tables.dead_letter)
    rows = held.limit(0) if rows is None else conformed(rows, held.schema)
    (rows.write.format("delta").mode("overwrite").option("replaceWhere", where)
     .options(**fencing.spark_options(tables.dead_letter)).save(tables.dead_letter))


def archived_dead_letters(spark: SparkSession, tables: Tables, archive_end: dict[int, int],
                          beside: dict | None) -> None:
    """Step 2: every dead letter of an archived record replaced by those made beside (`beside`: the request's record
    of them, with `dead_letter_version`), or dropped (None: every day is tiled at the cut)."""
    made = (spark.read.format("delta").option("versionAsOf", beside["dead_letter_version"]).load(tables.path(TABLE))
            if beside else None)
    _replace(spark, tables, made, _offsets({p: (0, o) for p, o in archive_end.items()}))


def remake_past_archive(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, topic: str,
                        archive_end: dict[int, int], events_end: dict[int, int]) -> dict:
    """Step 3's second half: the dead letters of [archive cut, E) made again under `pipeline`, replacing that range's;
    returns the range and its accounting (records read, well-formed, dead-lettered)."""
    bounds = {p: (archive_end.get(p, 0), e) for p, e in events_end.items() if e > archive_end.get(p, 0)}
    parsed = cached_for_two_passes(pipeline, parse_events(pipeline, kafka_range(
        spark, bootstrap, topic, {p: lo for p, (lo, _) in bounds.items()}, {p: hi for p, (_, hi) in bounds.items()})))
    try:
        counts = parsed.agg(F.count(F.lit(1)).alias("read"),
                            F.count_if(F.col("error").isNull()).alias("well_formed"),
                            F.count_if(F.col("error").isNotNull()).alias("dead_lettered")).first().asDict()
        _replace(spark, tables, dead_letter_rows(pipeline, parsed.where(F.col("error").isNotNull()), PHASE),
                 _offsets(bounds))
    finally:
        parsed.unpersist()
    return {"from": {str(p): lo for p, (lo, _) in sorted(bounds.items())},
            "to": {str(p): hi for p, (_, hi) in sorted(bounds.items())}, **counts}
