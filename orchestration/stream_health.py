"""How the stream is doing, read from the handoff log and its progress file (no JVM): figures and a verdict."""

import json
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import dagster as dg

from state_handoff import handoff_log
from state_handoff.lease import stream_running
from state_handoff.stream_control import read_json, stream_dir
from state_handoff.tables import Tables

RUNNING = (handoff_log.STREAM_STARTED, handoff_log.SWITCHED, handoff_log.CAUGHT_UP, handoff_log.FALLING_BEHIND)


def _utc(value) -> datetime | None:
    if value is None:
        return None
    value = datetime.fromisoformat(value) if isinstance(value, str) else value
    return value.replace(tzinfo=timezone.utc) if value.tzinfo is None else value


def _number(value):
    return dg.MetadataValue.null() if value is None else float(value)


def _behind(offsets) -> int | None:
    return None if offsets is None else sum(int(v) for v in offsets.values())


@dataclass
class Progress:
    """One look at the stream: the latest log status for the current handoff and the progress file's figures."""

    handoff_id: str
    status: str
    process_alive: bool
    updated: float | None
    batch_id: int | None
    offsets_behind: int | None
    input_rows_per_s: float | None
    processed_rows_per_s: float | None
    stream_watermark: str | None

    def watermark_delay_s(self, now: float) -> float | None:
        watermark = _utc(self.stream_watermark)
        return None if watermark is None else round(now - watermark.timestamp(), 3)

    def metadata(self, now: float) -> dict:
        return {
            "handoff_id": self.handoff_id,
            "status": self.status,
            "offsets_behind": _number(self.offsets_behind),
            "input_rows_per_s": _number(self.input_rows_per_s),
            "processed_rows_per_s": _number(self.processed_rows_per_s),
            "watermark_delay_s": _number(self.watermark_delay_s(now)),
            "batch_id": _number(self.batch_id),
            "stream_watermark": self.stream_watermark or "",
        }


def read_progress(tables: Tables) -> Progress | None:
    """None before any handoff."""
    entries = handoff_log.entries(None, tables)
    handoff = next((e for e in reversed(entries) if e.status == handoff_log.HANDOFF_COMMITTED), None)
    if handoff is None:
        return None
    latest = [e for e in entries if e.handoff_id == handoff.handoff_id][-1]
    progress = read_json(stream_dir(tables, handoff.handoff_id) / "progress.json") or {}
    return Progress(handoff.handoff_id, latest.status, stream_running(tables), progress.get("updated"),
                    progress.get("batch_id"), _behind(progress.get("offsets_behind")),
                    progress.get("input_rows_per_s"), progress.get("processed_rows_per_s"),
                    progress.get("stream_watermark"))


@dataclass
class Watch:
    """What the sensor remembers between ticks (its cursor)."""

    handoff_id: str | None = None
    updated: float | None = None
    batch_id: int | None = None
    batch_since: float | None = None
    problem: str | None = None

    @classmethod
    def from_cursor(cls, cursor: str | None) -> "Watch":
        return cls(**json.loads(cursor)) if cursor else cls()

    def to_cursor(self) -> str:
        return json.dumps(asdict(self))


def advance(watch: Watch, progress: Progress, now: float) -> Watch:
    """The watch after seeing `progress`: when the batch id last moved."""
    if watch.handoff_id != progress.handoff_id or watch.batch_id != progress.batch_id or watch.batch_since is None:
        since = now
    else:
        since = watch.batch_since
    return Watch(progress.handoff_id, progress.updated, progress.batch_id, since, watch.problem)


def problem(progress: Progress, watch: Watch, now: float, stall_seconds: float, max_offsets_behind: int) -> str | None:
    """Why the stream needs attention, or None: gone without a clean stop, stalled, or too far behind."""
    if progress.status == handoff_log.FAILED:
        return "the stream failed (see the handoff log)"
    if progress.status not in RUNNING:
        return None
    if not progress.process_alive:
        return f"the stream process is gone without a clean stop (last status {progress.status})"
    if progress.updated is not None and now - progress.updated > stall_seconds:
        return f"the stream has not reported progress for {now - progress.updated:.0f}s"
    behind = progress.offsets_behind or 0
    if behind and watch.batch_since is not None and now - watch.batch_since > stall_seconds:
        return f"no new batch for {now - watch.batch_since:.0f}s with {behind} offsets behind"
    if behind > max_offsets_behind:
        return f"{behind} offsets behind latest, past the threshold of {max_offsets_behind}"
    return None


def health_evaluation(progress: Progress, verdict: str | None, now: float) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=dg.AssetKey("stream"), check_name="stream_is_healthy", passed=verdict is None,
        metadata=progress.metadata(now), description=verdict or f"stream {progress.status.lower()}, no stall")


def transition_metadata(entry, tables: Tables, start_offsets: dict[int, int]) -> dict:
    """An observation of `stream` for one handoff log entry (SWITCHED, CAUGHT_UP, ...) of a handoff."""
    details = handoff_log.details(entry)
    progress = read_json(stream_dir(tables, entry.handoff_id) / "progress.json") or {}
    behind = details.get("offsets_behind", progress.get("offsets_behind"))
    rate = details.get("processed_rows_per_s", progress.get("processed_rows_per_s"))
    return {
        "status": entry.status,
        "handoff_id": entry.handoff_id,
        "at": dg.MetadataValue.timestamp(_utc(entry.at)),
        "start_offsets": dg.MetadataValue.json({str(p): o for p, o in sorted(start_offsets.items())}),
        "backlog_watermark": (dg.MetadataValue.timestamp(_utc(entry.backlog_watermark))
                              if entry.backlog_watermark else dg.MetadataValue.null()),
        "stream_watermark": details.get("stream_watermark", progress.get("stream_watermark")) or "",
        "offsets_behind": _number(_behind(behind)),
        "records_per_s": _number(rate),
        "details": dg.MetadataValue.json(details),
    }
