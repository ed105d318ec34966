"""`switchyard handoff`: the switch. From the latest committed backfill, the start offsets per partition,
checked against what the topic still retains, committed atomically as HANDOFF_COMMITTED.

Two boundary modes. `offsets` (the default) starts each partition right after the highest archived offset:
exact, and it needs the archive's Kafka coordinates. `time` starts at Kafka's offsets for a time T and
hands the stream the identities of the archived records it will read again (the overlap), which it skips.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.state_handoff import faults
from switchyard.state_handoff.clock import as_utc, naive_utc
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.details import HandoffCommitted
from switchyard.state_handoff.control.handoffs import (BOUNDARY_MODES, OFFSETS, TIME, Handoff, current_handoff,
                                                       from_entry)
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import archive_meta, list_archive, unreadable
from switchyard.state_handoff.io.kafka_io import consumer, offset_bounds
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.parsing import parse_events, within
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import stream_dir
from switchyard.state_handoff.tables import Tables


def start_offsets(boundary: dict[int, int], bounds: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Highest archived offset + 1 per partition; a partition with nothing archived (or added since) starts
    at its earliest retained offset."""
    return {p: (boundary[p] + 1 if p in boundary else earliest) for p, (earliest, _) in sorted(bounds.items())}


def check_retained(start: dict[int, int], bounds: dict[int, tuple[int, int]], topic: str) -> None:
    for p, offset in sorted(start.items()):
        earliest, latest = bounds[p]
        if not earliest <= offset <= latest:
            raise UserError(
                f"topic {topic} partition {p} no longer retains offset {offset} (retained {earliest}..{latest}): "
                "extend the archive past it and rerun the backfill before the handoff")


def check_no_gaps(gaps: list[dict], start: dict[int, int]) -> None:
    """Refuse while a file the backfill skipped (--skip-bad-files) holds offsets the stream will not read either:
    below its start offset. A skipped file's offsets at or after the start are no gap: the stream reads them from
    Kafka."""
    for gap in gaps:
        fix = "restore or rewrite the file (switchyard archive), then rerun the backfill"
        p = gap["partition"]
        if p in start and gap["from"] < start[p]:
            raise UserError(f"archive file {gap['file']} was skipped by --skip-bad-files and holds partition {p} "
                            f"offsets {gap['from']}..{gap['to']} ({gap['records']} records) below the boundary "
                            f"(the stream starts at offset {start[p]}): {fix}")


def parse_boundary_time(text: str) -> datetime:
    """An ISO-8601 instant (UTC when it names no offset) as naive UTC, truncated to Kafka's milliseconds."""
    try:
        at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--at must be an ISO-8601 time like 2026-01-02T09:30:00Z, not {text!r}") from None
    at = naive_utc(at)
    return at.replace(microsecond=at.microsecond // 1000 * 1000)


def _epoch_ms(t: datetime) -> int:
    return int(as_utc(t).timestamp() * 1000)


def offsets_for_time(bootstrap: str, topic: str, at: datetime, bounds: dict[int, tuple[int, int]]) -> dict[int, int]:
    """Per partition, Kafka's first offset with a timestamp at or after `at`; its latest offset when it has none."""
    from kafka import TopicPartition

    with consumer(bootstrap) as client:
        found = client.offsets_for_times({TopicPartition(topic, p): _epoch_ms(at) for p in bounds})
    return {tp.partition: (hit.offset if hit is not None else bounds[tp.partition][1])
            for tp, hit in sorted(found.items(), key=lambda item: item[0].partition)}


def check_retained_before(start: dict[int, int], bounds: dict[int, tuple[int, int]], topic: str,
                          at: datetime) -> None:
    """Time mode's retention check: where records were deleted and the first one kept is already at or after
    T, nothing shows that the deleted ones were all before T, so records between the archive and T may be gone."""
    check_retained(start, bounds, topic)
    for p, offset in sorted(start.items()):
        earliest, _ = bounds[p]
        if 0 < earliest == offset:
            raise UserError(
                f"topic {topic} partition {p} no longer retains a record before {at} (its earliest retained offset "
                f"{earliest} is already at or after it): pass a later --at (at most the newest archived Kafka "
                "timestamp), or extend the archive and rerun the backfill before the handoff")


def record_identity(pipeline: Pipeline) -> Column:
    """What makes a Kafka record the same in the archive and in the tail, for parsed records with `kafka_key`:
    `event_id:<id>` for a well-formed record with an event_id; else `raw:<sha-256 of the base64 Kafka key and
    value>` (malformed records, and well-formed ones without an id), so a byte-identical record is the same one."""
    raw = F.concat_ws(":", *[F.coalesce(F.base64(c), F.lit("-")) for c in ("kafka_key", "value")])
    event_id = F.col(pipeline.event_id)
    return (F.when(F.col("error").isNull() & event_id.isNotNull(), F.concat(F.lit("event_id:"), event_id))
            .otherwise(F.concat(F.lit("raw:"), F.sha2(raw, 256))))


def _archived_records(spark: SparkSession, tables: Tables) -> DataFrame:
    files = [f.path for f in list_archive(tables.archive) if unreadable(f.path) is None]
    if not files:
        raise UserError(f"the archive at {tables.archive} holds no readable files: run `switchyard archive` first")
    return (spark.read.option("basePath", tables.archive).parquet(*files)
            .select("kafka_timestamp", "kafka_key", "value"))


def _time_boundary(spark: SparkSession, pipeline: Pipeline, tables: Tables, handoff_id: str, at: datetime | None,
                   bootstrap: str, topic: str,
                   bounds: dict[int, tuple[int, int]]) -> tuple[dict[int, int], HandoffCommitted]:
    """Start offsets for T and the overlap's identities, written under the handoff's stream folder; the handoff's
    details of its boundary."""
    archived = _archived_records(spark, tables)
    # a producer may set any timestamp: one outside the accepted event times names no boundary (nor converts)
    newest = archived.where(within(pipeline, F.col("kafka_timestamp"))).agg(F.max("kafka_timestamp")).first()[0]
    if newest is None:
        raise UserError(f"the archive at {tables.archive} holds no records: archive some before the handoff")
    at = at if at is not None else newest - pipeline.allowed_lateness
    if at > newest:
        raise UserError(f"--at {at} is after the newest archived Kafka timestamp {newest}: records in between "
                        "would be in neither phase; pass an earlier --at")
    start = offsets_for_time(bootstrap, topic, at, bounds)
    check_retained_before(start, bounds, topic, at)
    since = at - pipeline.allowed_lateness
    path = str(stream_dir(tables, handoff_id) / "overlap")
    identities = (parse_events(pipeline, archived).where(F.col("kafka_timestamp") >= F.lit(since))
                  .select(record_identity(pipeline).alias("identity")).distinct())
    identities.write.mode("overwrite").parquet(path)
    return start, HandoffCommitted(
        boundary_mode=TIME, at=at.isoformat(), overlap_since=since.isoformat(), overlap_until=newest.isoformat(),
        overlap=path, overlap_identities=spark.read.parquet(path).count(),
        identity="event_id if well-formed with one, else sha-256 of the Kafka key and raw value")


def _check_same_boundary(existing: Handoff, boundary: str | None, at: datetime | None) -> None:
    """Asking again for the committed handoff returns it; asking for another boundary is refused."""
    same_mode = boundary in (None, existing.boundary_mode)
    same_at = at is None or (existing.overlap is not None and at == existing.overlap.at)
    if not (same_mode and same_at):
        committed = f"{existing.boundary_mode}" + (f" at {existing.overlap.at}" if existing.overlap else "")
        raise UserError(f"handoff {existing.handoff_id} is already committed with boundary {committed}: "
                        "a backfill has one handoff; rerun the backfill to hand off with another boundary")


def run_handoff(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str,
                boundary: str | None = None, at: datetime | None = None) -> Handoff:
    """Commit the handoff of the latest backfill; `boundary` is OFFSETS (when None) or TIME, `at` only with TIME."""
    if boundary not in (None, *BOUNDARY_MODES):
        raise UserError(f"--boundary must be one of {', '.join(BOUNDARY_MODES)}, not {boundary!r}")
    if at is not None and boundary != TIME:
        raise UserError("--at applies only with --boundary time")
    backfill = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
    if backfill is None:
        raise UserError(f"pipeline {pipeline.name} has no committed backfill in {tables.root}: "
                        "run `switchyard backfill` first")
    existing = current_handoff(tables)
    if existing and existing.handoff_id == backfill.handoff_id:
        _check_same_boundary(existing, boundary, at)
        return existing
    backfilled = details.of(backfill)
    gaps = backfilled.gaps or []
    if backfilled.complete is False and (backfilled.records_not_backfilled or not gaps):
        raise UserError(f"the backfill {backfill.handoff_id} does not cover the whole archive "
                        f"(records not yet tiled per partition: {backfilled.records_not_backfilled}): "
                        "backfill the remaining days (`switchyard backfill` without --from and --to covers every "
                        "archived day), then hand off")
    topic = archive_meta(tables.archive)["topic"]
    if boundary == TIME and backfilled.kafka_tail:
        raise UserError(f"the backfill {backfill.handoff_id} read the Kafka tail up to its end, so its boundary is "
                        "those offsets: hand off with --boundary offsets, or rerun the backfill without --kafka-tail")
    bounds = offset_bounds(bootstrap, topic)
    if boundary == TIME:
        start, committed = _time_boundary(spark, pipeline, tables, backfill.handoff_id, at, bootstrap, topic, bounds)
    else:
        archived_to = {int(p): int(o) for p, o in (backfilled.boundary or {}).items()}
        start = start_offsets(archived_to, bounds)
        check_retained(start, bounds, topic)
        committed = HandoffCommitted(boundary_mode=OFFSETS, boundary=archived_to)
    check_no_gaps(gaps, start)
    faults.reach("handoff.before_log")
    entry = handoff_log.append(
        tables, backfill.handoff_id, Status.HANDOFF_COMMITTED, state_version=backfill.state_version,
        start_offsets=start, backlog_watermark=backfill.backlog_watermark,
        details=replace(committed, topic=topic, retained={str(p): list(b) for p, b in bounds.items()},
                        **definition.as_details(pipeline)))
    return from_entry(entry)
