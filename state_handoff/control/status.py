"""`switchyard status`: where a pipeline stands, from the handoff log, the stream's batches (both Delta, read
through delta-rs, no JVM) and the running stream's progress cache."""

from __future__ import annotations

import time

from switchyard.state_handoff.clock import utc_now
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.lost_offsets import lost_ranges
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.tables import Tables


def pipeline_status(tables: Tables, bootstrap: str | None = None, view: PipelineView | None = None,
                    pipeline=None) -> dict:
    """Where the pipeline stands, as `switchyard status --json` prints it; `view`: one already read; `pipeline`:
    the definition this process holds, shown beside the one the tables were made with."""
    view = view or PipelineView.read(tables)
    owner, entries, last, running = view.owner, list(view.entries), view.last, view.streaming
    handoff, backfill = view.handoff, view.backfill
    status = {
        "pipeline": tables.pipeline,
        "phase": str(view.phase),
        "stream_running": running,
        "owner": owner.describe(utc_now()) if owner else None,
        "lease": {"epoch": owner.epoch, "command": owner.command, "host": owner.owner_host, "pid": owner.owner_pid}
        if owner else None,
        "latest_status": str(last.status) if last else None,
        "latest_at": last.at.isoformat() if last else None,
        "handoff_id": handoff.handoff_id if handoff else None,
        "start_offsets": handoff_log.offsets(handoff) if handoff else None,
        "backlog_watermark": (handoff or backfill).backlog_watermark.isoformat()
        if (handoff or backfill) and (handoff or backfill).backlog_watermark else None,
        "dead_lettered": 0,
        "late": 0,
    }
    # Counted in the tables, from their commit statistics: across rebases each record is in one of them at most
    # once, while the log's figures are each backfill's and each handoff's own.
    status["dead_lettered"] = _rows(tables.dead_letter)
    status["late"] = _rows(tables.late)
    rebased = view.rebases
    status["rebases"] = len(rebased)
    if rebased:
        last_rebase = rebased[-1]
        status["last_reconciliation_keys_different"] = last_rebase.reconciliation["keys_different"]
        status["last_rebase_s"] = last_rebase.rebase_s
    if pipeline is not None:
        _add_definition(status, pipeline, view)
    lost = lost_ranges(entries)
    if lost:
        status["lost_offsets"] = lost
    bounds = _topic_bounds(tables, bootstrap) if bootstrap else None
    if bounds is not None:
        _add_retention(status, tables, bootstrap, bounds)
    if handoff is not None:
        _add_stream_figures(status, tables, handoff.handoff_id, bounds, view.progress)
    return status


KAFKA_AWAY_S = 30.0  # after Kafka was found out of reach, how long a status leaves its figures out
_KAFKA_AWAY: dict[str, float] = {}  # bootstrap -> until when (monotonic)


def _topic_bounds(tables: Tables, bootstrap: str) -> dict[int, tuple[int, int]] | None:
    """The archived topic's offset bounds, read once for every figure that needs Kafka; None when there is no archive
    yet or Kafka is out of reach, and for KAFKA_AWAY_S after that (a scrape every few seconds of a dozen pipelines
    must not wait on a broker that is down, each time for each pipeline)."""
    from switchyard.state_handoff.io.archive_files import archive_meta
    from switchyard.state_handoff.io.kafka_io import offset_bounds

    if time.monotonic() < _KAFKA_AWAY.get(bootstrap, 0.0) or not storage.exists(tables.archive):
        return None
    try:
        topic = archive_meta(tables.archive)["topic"]
    except Exception:  # no archive record yet
        return None
    try:
        return offset_bounds(bootstrap, topic)
    except Exception:  # the broker may be down; status still reports the rest
        _KAFKA_AWAY[bootstrap] = time.monotonic() + KAFKA_AWAY_S
        return None


def _add_definition(status: dict, pipeline, view: PipelineView) -> None:
    """The definition's version now and as the tables were made with it, and the parts that differ."""
    from switchyard.state_handoff.language import definition

    found = view.recorded_definition
    recorded = found[1] if found else None
    status["definition"] = {"version": definition.version(pipeline),
                            "recorded": recorded["version"] if recorded else None,
                            "changed": definition.changes(recorded, pipeline) if recorded else []}
    previous = view.ledger.previous_definition
    if previous is not None and not previous.dropped:  # what `switchyard rollback` restores
        status["definition"]["kept_for_rollback"] = previous.record["version"]


def _add_retention(status: dict, tables: Tables, bootstrap: str, bounds: dict[int, tuple[int, int]]) -> None:
    """Per partition, the archive's cut minus Kafka's earliest retained offset (negative: retention has passed the
    cut, and no rebase can recompute the records in between), and the partitions where it has."""
    from switchyard.state_handoff.control import kafka_retention

    try:
        margins = kafka_retention.margins(tables, bootstrap, bounds)
    except Exception:  # no archive record yet: status still reports the rest
        return
    status["archive_retention_margin"] = {str(m.partition): m.offsets for m in margins}
    status["retention_past_archive"] = [m.as_dict() for m in margins if m.passed]


def _rows(uri: str) -> int:
    """Rows of an append-only Delta table, from its files' statistics (no data read); 0 before it exists."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        actions = pa.table(DeltaTable(uri, storage_options=storage.delta_options(uri)).get_add_actions(flatten=True))
    except TableNotFoundError:
        return 0
    return int(sum(n or 0 for n in actions.column("num_records").to_pylist()))


def _add_stream_figures(status: dict, tables: Tables, handoff_id: str, bounds: dict | None, progress: dict) -> None:
    batches = stream_progress.batches(tables, handoff_id)
    per_partition = stream_progress.accounting(batches)
    status["stream_accounting"] = per_partition
    status["stream_batches"] = len(batches)
    last = batches[-1] if batches else None
    status["stream_watermark"] = last.watermark_after.isoformat() if last and last.watermark_after else None
    status["input_rows_per_s"] = progress.get("input_rows_per_s")
    status["processed_rows_per_s"] = progress.get("processed_rows_per_s")
    status["last_batch_ms"] = progress.get("last_batch_ms")
    status["update_batch_ms"] = progress.get("update_batch_ms")
    status["state_updates_behind"] = progress.get("state_updates_behind")
    status["offsets_behind"] = progress.get("offsets_behind")
    status["lag_error"] = progress.get("lag_error")
    status["progress_updated"] = progress.get("updated")
    if not status["stream_running"]:
        # the cache holds the running stream's last look; a clean stop drained every update into `state` before
        # it logged STOPPED, and after any other end nobody knows
        status["state_updates_behind"] = 0 if status["latest_status"] == Status.STOPPED else None
        if bounds is not None and progress:
            status["offsets_behind"] = _behind_now(bounds, tables, handoff_id, per_partition, status["start_offsets"])


def _behind_now(latest: dict, tables: Tables, handoff_id: str, per_partition: dict, start: dict) -> dict | None:
    """With no stream running: latest (last stable) offsets minus where the events query's last committed batch
    ended (its records read, past the start, when its checkpoint says nothing: counts that miss a transaction's
    markers and aborted records, which take offsets no reader sees)."""
    from switchyard.state_handoff.io.archive_files import archive_meta
    from switchyard.state_handoff.stream.checkpoints import committed_end_offsets
    from switchyard.state_handoff.stream.layout import StreamPaths

    try:
        topic = archive_meta(tables.archive)["topic"]
        ended = committed_end_offsets(str(StreamPaths.of(tables, handoff_id).events_checkpoint), topic) or {}
    except Exception:  # a checkpoint being written: status still reports the rest
        return None
    behind = {}
    for p, (_, hi) in latest.items():
        read_to = ended.get(p, start.get(p, 0) + per_partition.get(str(p), {}).get("read", 0))
        behind[str(p)] = max(0, hi - read_to)
    return behind


def _for_people(value) -> str:
    """Per-partition figures as `p0:2110, p1:1980 (total 4090)`; a rate or a duration to one decimal (34.1, not
    34.136546184738954); everything else as it is."""
    if isinstance(value, dict) and value and all(isinstance(v, (int, float)) for v in value.values()):
        parts = ", ".join(f"p{p}:{_figure(v)}" for p, v in sorted(value.items(), key=lambda item: int(item[0])))
        return f"{parts} (total {_figure(sum(value.values()))})" if len(value) > 1 else parts
    return _figure(value)


def _figure(value) -> str:
    return f"{value:,.1f}" if isinstance(value, float) else str(value)


def format_status(status: dict) -> str:
    lines = [f"pipeline {status['pipeline']}: {status['phase']} (latest: {status['latest_status']} at {status['latest_at']})"]
    for label, key in (("owner", "owner"), ("handoff", "handoff_id"), ("start offsets", "start_offsets"),
                       ("backlog watermark", "backlog_watermark"), ("stream watermark", "stream_watermark"),
                       ("offsets behind latest", "offsets_behind"), ("input rate (rows/s)", "input_rows_per_s"),
                       ("processed rate (rows/s)", "processed_rows_per_s"), ("last batch (ms)", "last_batch_ms"),
                       ("last update batch (ms)", "update_batch_ms"),
                       ("updates not yet in state", "state_updates_behind"),
                       ("dead-lettered", "dead_lettered"), ("late", "late"), ("rebases", "rebases"),
                       ("last reconciliation: keys different", "last_reconciliation_keys_different")):
        if status.get(key) is not None:
            lines.append(f"  {label}: {_for_people(status[key])}")
    if status.get("archive_retention_margin"):  # per partition; a sum would mean nothing
        lines.append("  archive's cut ahead of Kafka's retention (offsets): " + ", ".join(
            f"p{p}:{v}" for p, v in sorted(status["archive_retention_margin"].items(), key=lambda item: int(item[0]))))
    for m in status.get("retention_past_archive", []):
        lines.append(f"  RETENTION PAST THE ARCHIVE: partition {m['partition']} offsets {m['archive_cut']}.."
                     f"{m['earliest_retained'] - 1} are neither archived nor retained by Kafka: no rebase can "
                     "recompute them (the streamed state stands)")
    shape = status.get("definition") or {}
    if shape.get("recorded") and shape["recorded"] != shape["version"]:
        lines.append(f"  DEFINITION CHANGED: version {shape['version']} now, {shape['recorded']} in the tables "
                     f"({', '.join(shape['changed'])}): backfill, handoff, rebase and stream refuse until they agree")
    if shape.get("kept_for_rollback"):
        lines.append(f"  kept for `switchyard rollback`: definition version {shape['kept_for_rollback']} (until "
                     "`switchyard redeploy --drop-previous`)")
    for r in status.get("lost_offsets", []):
        lines.append(f"  lost to Kafka's retention: partition {r['partition']} offsets {r['from']}..{r['to'] - 1} "
                     f"({r['records']} records, handoff {r['handoff_id']})")
    if status.get("lag_error"):
        lines.append(f"  offsets behind latest: unknown ({status['lag_error']})")
    return "\n".join(lines)
