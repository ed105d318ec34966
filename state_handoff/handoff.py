"""`switchyard handoff`: the switch. From the latest committed backfill, the start offsets per partition,
checked against what the topic still retains, committed atomically as HANDOFF_COMMITTED."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from pyspark.sql import SparkSession

from state_handoff import handoff_log
from state_handoff.archive_files import archive_meta
from state_handoff.errors import UserError
from state_handoff.kafka_io import offset_bounds
from state_handoff.spec import Pipeline
from state_handoff.tables import Tables


@dataclass(frozen=True)
class Handoff:
    handoff_id: str
    topic: str
    start_offsets: dict[int, int]
    backlog_watermark: datetime | None
    state_version: int
    committed_at: datetime
    reused: bool = False

    def summary(self, pipeline: str) -> str:
        verb = "already committed" if self.reused else "committed"
        offsets = ", ".join(f"p{p}:{o}" for p, o in sorted(self.start_offsets.items()))
        return (f"handoff {pipeline} {self.handoff_id} {verb}: topic {self.topic} from {offsets}; "
                f"state version {self.state_version}; backlog watermark {self.backlog_watermark}")


def from_entry(entry, reused: bool = False) -> Handoff:
    return Handoff(entry.handoff_id, handoff_log.details(entry)["topic"], handoff_log.offsets(entry),
                   entry.backlog_watermark, entry.state_version, entry.at, reused)


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


def current_handoff(spark: SparkSession, tables: Tables) -> Handoff | None:
    entry = handoff_log.latest(spark, tables, handoff_log.HANDOFF_COMMITTED)
    return from_entry(entry, reused=True) if entry else None


def run_handoff(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str) -> Handoff:
    backfill = handoff_log.latest(spark, tables, handoff_log.BACKFILL_COMMITTED)
    if backfill is None:
        raise UserError(f"pipeline {pipeline.name} has no committed backfill in {tables.root}: "
                        "run `switchyard backfill` first")
    existing = current_handoff(spark, tables)
    if existing and existing.handoff_id == backfill.handoff_id:
        return existing
    details = handoff_log.details(backfill)
    if not details.get("complete", True):
        raise UserError(f"the backfill {backfill.handoff_id} does not cover the whole archive "
                        f"(records not yet tiled per partition: {details['records_not_backfilled']}): "
                        "backfill the remaining days, then hand off")
    topic = archive_meta(tables.archive)["topic"]
    bounds = offset_bounds(bootstrap, topic)
    boundary = {int(p): int(o) for p, o in details.get("boundary", {}).items()}
    start = start_offsets(boundary, bounds)
    check_retained(start, bounds, topic)
    entry = handoff_log.append(
        spark, tables, backfill.handoff_id, handoff_log.HANDOFF_COMMITTED, state_version=backfill.state_version,
        start_offsets=start, backlog_watermark=backfill.backlog_watermark,
        details={"topic": topic, "boundary_mode": "offsets", "boundary": boundary,
                 "retained": {str(p): list(b) for p, b in bounds.items()}})
    return from_entry(entry)
