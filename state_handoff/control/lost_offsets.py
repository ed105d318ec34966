"""A handoff whose start offsets Kafka no longer retains: the stream's one-line refusal, and the recovery that
restarts the handoff from what Kafka still holds, recording the records in between as lost.

A handoff committed while Kafka held its start offsets may wait past the topic's retention before its stream first
runs (a stopped deployment, a long outage). Its stream would then read nothing of the deleted range and could
never account for it. When the archive has grown past the deleted range since, it holds those records: a rebase
reads them from there, and nothing is lost. Otherwise the only way on loses those records, and it is taken only
when asked: `switchyard handoff --restart-from-retained` commits a new handoff over the same backfilled state that
starts at Kafka's earliest retained offsets, and records each partition's lost range [from, to) in the log
(BACKFILL_COMMITTED and HANDOFF_COMMITTED details, `lost`), where `switchyard status` reports it.

A stream that has run and falls behind the retention later (its queries fail on data Kafka no longer holds) is
rebased instead: the rebase reads what Kafka deleted from the archive (`behind_retention`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status, has_switched
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.tables import Tables

if TYPE_CHECKING:  # the handoff module brings Spark's API; `status` reads lost ranges here without it
    from switchyard.state_handoff.control.handoffs import Handoff

COMMAND = "switchyard handoff --pipeline {pipeline} --restart-from-retained"


def expired(handoff: Handoff, bounds: dict[int, tuple[int, int]]) -> dict[int, tuple[int, int]]:
    """Per partition, the start offsets Kafka deleted: [start, earliest retained)."""
    return {p: (o, bounds[p][0]) for p, o in sorted(handoff.start_offsets.items()) if p in bounds and o < bounds[p][0]}


def refuse_if_expired(tables: Tables, handoff: Handoff, bootstrap: str) -> None:
    """Before a handoff's stream first starts: refuse, naming the recovery command, when Kafka no longer retains
    a start offset (Spark's own failure would be a stack trace, or with failOnDataLoss off a silent loss)."""
    gone = expired(handoff, offset_bounds(bootstrap, handoff.topic))
    if gone:
        ranges = ", ".join(f"partition {p} offsets {a}..{b - 1}" for p, (a, b) in gone.items())
        if archive_holds(tables, handoff.topic, gone):
            raise UserError(f"topic {handoff.topic} no longer retains the start of handoff {handoff.handoff_id} "
                            f"({ranges} deleted by Kafka's retention), but the archive holds them: run "
                            f"`switchyard rebase --pipeline {tables.pipeline}` to take them from the archive")
        raise UserError(f"topic {handoff.topic} no longer retains the start of handoff {handoff.handoff_id} "
                        f"({ranges} deleted by Kafka's retention): run `{COMMAND.format(pipeline=tables.pipeline)}` "
                        "to stream from what Kafka retains and record those records as lost")


def archive_holds(tables: Tables, topic: str, ranges: dict[int, tuple[int, int]]) -> bool:
    """Whether the pipeline's archive of `topic` holds every offset of `ranges` ([from, to) per partition)."""
    from switchyard.state_handoff.io.archive_files import archive_meta

    try:
        meta = archive_meta(tables.archive)
    except (UserError, FileNotFoundError, OSError):
        return False
    first = {int(p): int(o) for p, o in (meta.get("first") or {}).items()}
    cut = {int(p): int(o) for p, o in (meta.get("cut") or {}).items()}
    return meta.get("topic") == topic and all(p in cut and first.get(p, 0) <= a and cut[p] >= b
                                              for p, (a, b) in ranges.items())


def behind_retention(tables: Tables, topic: str, bootstrap: str) -> str:
    """Why a query of a stream that has run failed on records Kafka no longer holds, and the way on."""
    earliest = {p: lo for p, (lo, _) in offset_bounds(bootstrap, topic).items()}
    reached = {p: (lo, lo) for p, lo in earliest.items() if lo > 0}  # the archive reaches what Kafka retains
    if archive_holds(tables, topic, reached):
        return (f"Kafka's retention deleted records of topic {topic} the stream had not read yet (it retains from "
                + ", ".join(f"p{p}:{lo}" for p, lo in sorted(earliest.items()))
                + f"); the archive holds them: run `switchyard rebase --pipeline {tables.pipeline}` to take them "
                "from the archive")
    return (f"Kafka's retention deleted records of topic {topic} the stream had not read yet, before the archive "
            "took them (it retains from " + ", ".join(f"p{p}:{lo}" for p, lo in sorted(earliest.items()))
            + "): those records are in neither phase")


def restart_from_retained(tables: Tables, bootstrap: str) -> Handoff:
    """Commit a new handoff over the current one's backfilled state, starting where Kafka's retention begins on
    each partition whose start offset it deleted; the deleted ranges are recorded as lost. Only a handoff whose
    stream never ran a batch: once it has, its state has moved past the backfill's."""
    from switchyard.state_handoff.control.handoffs import OFFSETS, current_handoff, from_entry

    current = current_handoff(tables)
    if current is None:
        raise UserError(f"pipeline {tables.pipeline} has no committed handoff to restart: run `switchyard backfill` "
                        "and `switchyard handoff`")
    if current.boundary_mode != OFFSETS:
        raise UserError(f"handoff {current.handoff_id} has a time boundary: --restart-from-retained restarts "
                        "offsets-boundary handoffs; extend the archive and rerun the backfill instead")
    entries = handoff_log.entries(tables)
    if has_switched(entries, current.handoff_id) or stream_progress.batches(tables, current.handoff_id):
        raise UserError(f"handoff {current.handoff_id} has streamed: --restart-from-retained restarts only a handoff "
                        "whose stream never ran; rebase it with `switchyard rebase`")
    bounds = offset_bounds(bootstrap, current.topic)
    gone = expired(current, bounds)
    if not gone:
        raise UserError(f"topic {current.topic} still retains every start offset of handoff {current.handoff_id}: "
                        "nothing is lost; run `switchyard stream`")
    lost = {str(p): {"from": a, "to": b, "records": b - a} for p, (a, b) in gone.items()}
    start = {p: max(o, bounds[p][0]) if p in bounds else o for p, o in current.start_offsets.items()}
    backfill = handoff_log.latest(tables, Status.BACKFILL_COMMITTED, handoff_id=current.handoff_id)
    committed = handoff_log.latest(tables, Status.HANDOFF_COMMITTED, handoff_id=current.handoff_id)
    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(tables, handoff_id, Status.BACKFILL_COMMITTED, state_version=backfill.state_version,
                       backlog_watermark=backfill.backlog_watermark,
                       details=replace(details.of(backfill), restarted_from=current.handoff_id, lost=lost))
    entry = handoff_log.append(
        tables, handoff_id, Status.HANDOFF_COMMITTED, state_version=current.state_version, start_offsets=start,
        backlog_watermark=current.backlog_watermark,
        details=replace(details.of(committed), restarted_from=current.handoff_id, lost=lost,
                        retained={str(p): list(b) for p, b in bounds.items()}))
    return from_entry(entry)


def lost_ranges(entries: list) -> list[dict]:
    """Every range the log records as lost, oldest first: handoff, partition, from, to (exclusive), records."""
    return [{"handoff_id": e.handoff_id, "partition": int(p), **r}
            for e in entries if e.status == Status.HANDOFF_COMMITTED
            for p, r in sorted((details.of(e).lost or {}).items(), key=lambda item: int(item[0]))]
