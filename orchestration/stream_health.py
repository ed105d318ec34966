"""How the stream is doing, read from the handoff log, the lease and the progress cache (no JVM), with its update
latency sampled from Kafka: figures under stable keys for Dagster's plots, and a verdict per health check."""

import json
from dataclasses import asdict, dataclass, field
from datetime import datetime

import dagster as dg

from switchyard.state_handoff.clock import as_utc
from switchyard.state_handoff.control import details, handoff_log, lifecycle, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.stream.layout import read_json, stream_dir
from switchyard.state_handoff.stream.update_latency import UpdateLatency
from switchyard.state_handoff.tables import Tables

# A watermark further than this behind the wall clock means the events are historical (a replayed archive, the
# demo's January data): a delay against the wall clock would only say how old the data is, so none is reported.
HISTORICAL_AFTER_S = 86_400.0

ALIVE, CAUGHT_UP, LATENCY, RECONCILED, HEALTHY = ("stream_process_alive", "stream_caught_up",
                                                  "stream_update_latency", "stream_reconciled",
                                                  "stream_is_healthy")
CHECKS = {
    ALIVE: "The stream process runs (it holds the pipeline's lease), or it stopped cleanly; red when it died or failed.",
    CAUGHT_UP: "Offsets behind latest at or under the monitor's max_offsets_behind.",
    LATENCY: "Update latency (input's Kafka timestamp to its update's) at the 99th percentile under the monitor's "
             "max_update_latency_s.",
    RECONCILED: "The last rebase found the recomputed state equal to the streamed state (keys different = 0).",
}


def _utc(value: datetime | str | None) -> datetime | None:
    """A log or progress time (naive UTC, or its ISO text) as an aware UTC datetime."""
    return as_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)


def _number(value):
    return dg.MetadataValue.null() if value is None else float(value)


def _behind(offsets) -> int | None:
    return None if offsets is None else sum(int(v) for v in offsets.values())


@dataclass
class Progress:
    """One look at the stream: the latest log status of the current handoff, the progress cache's figures, the
    last rebase's reconciliation and (when sampled) the update latency."""

    handoff_id: str
    status: str
    process_alive: bool
    updated: float | None
    batch_id: int | None
    offsets_behind: int | None
    input_rate: float | None
    processed_rate: float | None
    stream_watermark: str | None
    topic: str | None = None
    reason: str = ""
    rebases: int = 0
    reconciliation_keys_different: int | None = None
    latency: UpdateLatency | None = None

    def watermark_delay_s(self, now: float) -> float | None:
        """Wall clock minus the stream's watermark; None when the events are historical."""
        watermark = _utc(self.stream_watermark)
        if watermark is None or now - watermark.timestamp() > HISTORICAL_AFTER_S:
            return None
        return round(now - watermark.timestamp(), 3)

    def metadata(self, now: float) -> dict:
        latency = self.latency
        delay = self.watermark_delay_s(now)
        return {
            "phase": self.status,
            "handoff_id": self.handoff_id,
            "offsets_behind": _number(self.offsets_behind),
            "update_latency_p50_s": _number(latency.p50_s if latency else None),
            "update_latency_p99_s": _number(latency.p99_s if latency else None),
            "input_rate": _number(self.input_rate),
            "processed_rate": _number(self.processed_rate),
            "watermark_delay_s": _number(delay),
            "batch_id": _number(self.batch_id),
            "stream_watermark": self.stream_watermark or "",
            "event_times": "historical: no watermark delay" if self.stream_watermark and delay is None else "live",
        }


def read_progress(tables: Tables) -> Progress | None:
    """None before any handoff."""
    return progress_from(PipelineView.read(tables))


def progress_from(view: PipelineView) -> Progress | None:
    """The stream's progress as one view of the pipeline shows it; None before any handoff."""
    handoff, latest, rebased, progress = view.handoff, view.current, view.rebases, view.progress
    if handoff is None:
        return None
    return Progress(handoff.handoff_id, str(latest.status), view.streaming, progress.get("updated"),
                    progress.get("batch_id"), _behind(progress.get("offsets_behind")),
                    progress.get("input_rows_per_s"), progress.get("processed_rows_per_s"),
                    progress.get("stream_watermark"), topic=details.of(handoff).topic,
                    reason=str(details.reason(latest) or ""), rebases=len(rebased),
                    reconciliation_keys_different=rebased[-1].reconciliation["keys_different"] if rebased else None)


def reported_progress(phase: str, progress: dict, update_latency: dict | None) -> Progress:
    """What a stream reported of itself through Pipes: its phase, the figures it writes to progress.json, and the
    update latency it sampled (jobs/stream/pipes.py)."""
    return Progress(progress["handoff_id"], phase, True, progress.get("updated"), progress.get("batch_id"),
                    _behind(progress.get("offsets_behind")), progress.get("input_rows_per_s"),
                    progress.get("processed_rows_per_s"), progress.get("stream_watermark"),
                    latency=UpdateLatency(**update_latency) if update_latency else None)


def sample_latency(progress: Progress, bootstrap: str, pipeline, tables: Tables) -> Progress:
    """The progress with the update latency sampled from Kafka, while a stream runs; a broker out of reach leaves
    it unknown (the lag figures already say so)."""
    from switchyard.jobs.stream.updates_topic import last_started_with
    from switchyard.state_handoff.stream.update_latency import sample

    if progress.topic and progress.process_alive:
        try:
            progress.latency = sample(bootstrap, pipeline, progress.topic, last_started_with(tables))
        except Exception:  # noqa: BLE001 - a monitor fails soft
            progress.latency = None
    return progress


@dataclass
class Watch:
    """What the sensor remembers between ticks (its cursor)."""

    handoff_id: str | None = None
    updated: float | None = None
    batch_id: int | None = None
    batch_since: float | None = None
    problem: str | None = None
    verdicts: dict = field(default_factory=dict)  # check name -> passed, as last reported
    log_seq: int = -1  # the last handoff log entry relayed as an observation

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
    return Watch(progress.handoff_id, progress.updated, progress.batch_id, since, watch.problem,
                 dict(watch.verdicts), watch.log_seq)


def problem(progress: Progress, watch: Watch, now: float, stall_seconds: float, max_offsets_behind: int) -> str | None:
    """Why the stream needs attention, or None: gone without a clean stop, stalled, or too far behind."""
    if progress.status == Status.FAILED:
        return "the stream failed (see the handoff log)"
    if progress.status not in lifecycle.RUNNING:
        return None
    if lifecycle.gone(progress.status, progress.process_alive):
        return f"the stream process is gone without a clean stop (last status {progress.status})"
    if progress.updated is not None and now - progress.updated > stall_seconds:
        return f"the stream has not reported progress for {now - progress.updated:.0f}s"
    behind = progress.offsets_behind or 0
    if behind and watch.batch_since is not None and now - watch.batch_since > stall_seconds:
        return f"no new batch for {now - watch.batch_since:.0f}s with {behind} offsets behind"
    if behind > max_offsets_behind:
        return f"{behind} offsets behind latest, past the threshold of {max_offsets_behind}"
    return None


@dataclass(frozen=True)
class Verdict:
    check_name: str
    passed: bool
    description: str
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR


def _alive(p: Progress) -> Verdict:
    if p.status == Status.FAILED:
        return Verdict(ALIVE, False, f"the stream failed: {p.reason or 'see the handoff log'}")
    if p.status in lifecycle.RUNNING | lifecycle.REBASING:  # a rebase runs inside the stream process
        if p.process_alive:
            return Verdict(ALIVE, True, f"running ({p.status})")
        return Verdict(ALIVE, False, f"the stream process is gone without a clean stop (last status {p.status})")
    if p.status == Status.STOPPED:
        return Verdict(ALIVE, True, f"stopped cleanly ({p.reason or 'stopped'})")
    return Verdict(ALIVE, False, f"no stream has started from handoff {p.handoff_id} yet",
                   dg.AssetCheckSeverity.WARN)


def _caught_up(p: Progress, max_offsets_behind: int) -> Verdict:
    if p.offsets_behind is None:
        return Verdict(CAUGHT_UP, True, "lag not measured yet (no progress reported)")
    if p.offsets_behind > max_offsets_behind:
        return Verdict(CAUGHT_UP, False, f"{p.offsets_behind} offsets behind latest, past the threshold of "
                                         f"{max_offsets_behind}")
    return Verdict(CAUGHT_UP, True, f"{p.offsets_behind} offsets behind latest (threshold {max_offsets_behind})")


def _latency(p: Progress, max_update_latency_s: float) -> Verdict:
    if p.latency is None:
        return Verdict(LATENCY, True, "no recent input matched to its update (nothing streaming, or not sampled)")
    figures = f"p50 {p.latency.p50_s:.3f}s, p99 {p.latency.p99_s:.3f}s over {p.latency.matched} updates"
    if p.latency.p99_s > max_update_latency_s:
        return Verdict(LATENCY, False, f"update latency {figures}: past the bound of {max_update_latency_s:g}s")
    return Verdict(LATENCY, True, f"update latency {figures} (bound {max_update_latency_s:g}s)")


def _reconciled(p: Progress) -> Verdict:
    if p.reconciliation_keys_different is None:
        return Verdict(RECONCILED, True, "no rebase yet")
    if p.reconciliation_keys_different:
        return Verdict(RECONCILED, False, f"the last rebase found {p.reconciliation_keys_different} keys whose "
                                          "recomputed state differs from the streamed state (see HANDOFF_COMMITTED)")
    return Verdict(RECONCILED, True, f"the last of {p.rebases} rebases reconciled: recomputed state = streamed state")


def verdicts(progress: Progress, monitor) -> list[Verdict]:
    """The stream's health checks on this reading (`monitor`: the StreamMonitorResource's thresholds)."""
    return [_alive(progress), _caught_up(progress, monitor.max_offsets_behind),
            _latency(progress, monitor.max_update_latency_s), _reconciled(progress)]


def check_evaluation(progress: Progress, verdict: Verdict, now: float,
                     asset_key: dg.AssetKey) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(asset_key=asset_key, check_name=verdict.check_name,
                                   passed=verdict.passed, severity=verdict.severity,
                                   metadata=progress.metadata(now), description=verdict.description)


def health_evaluation(progress: Progress, verdict: str | None, now: float,
                      asset_key: dg.AssetKey) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=asset_key, check_name=HEALTHY, passed=verdict is None,
        metadata=progress.metadata(now), description=verdict or f"stream {progress.status.lower()}, no stall")


# ---------------------------------------------------------------- the handoff log's transitions as observations

# What `stream` observes: every status from the handoff on; the backfill's are the state asset's own.
OBSERVED = frozenset(Status) - {Status.BACKFILL_STARTED, Status.BACKFILL_COMMITTED}


def _rebase_figures(logged: details.Details | None, asked: requests.Request | None) -> dict:
    """A rebase's decision (REBASE_REQUESTED: why, and for a switch back the lag that decided it) and its outcome
    (PAUSED: the cut; HANDOFF_COMMITTED at a cut: time taken and the reconciliation)."""
    if isinstance(asked, requests.RebaseRequest):
        decided, redeploy = asked.figures, asked.redeploy  # a switch back's figures (jobs/stream/monitor.py)
        return {"rebase_reason": asked.reason or "", "requested_by": asked.requested_by or "",
                **({"definition_from": redeploy.record["version"], "definition_to": redeploy.version}
                   if redeploy else {}),
                "switch_back_offsets_behind": _number(decided.get("behind")),
                "switch_back_threshold": _number(decided.get("threshold")),
                "behind_for_s": _number(decided.get("behind_for_s"))}
    if isinstance(logged, details.Paused):
        cut = (logged.cut or {}).get("offsets", {})
        return {"rebase_reason": logged.reason or "", "cut": dg.MetadataValue.json(cut)}
    if isinstance(logged, details.HandoffCommitted) and logged.reconciliation is not None:
        reconciliation = logged.reconciliation
        return {"rebase_s": _number(logged.rebase_s),
                "reconciliation_keys_different": _number(reconciliation.get("keys_different")),
                "reconciliation_keys": _number(reconciliation.get("keys_recomputed")),
                "previous_handoff": logged.previous_handoff or "",
                "definition_version": (logged.definition or {}).get("version") or ""}
    return {}


def recorded_figures(entry) -> dict:
    """The stream's figures an entry recorded, under the progress cache's names: CAUGHT_UP's and FALLING_BEHIND's
    lag and rates, STOPPED's lag, a switch back request's lag and rate."""
    logged, asked = details.of(entry), requests.read(entry)
    if isinstance(logged, details.Lag):
        return {"offsets_behind": logged.offsets_behind, "stream_watermark": logged.stream_watermark,
                "input_rows_per_s": logged.input_rows_per_s, "processed_rows_per_s": logged.processed_rows_per_s}
    if isinstance(logged, details.Stopped):
        return {"offsets_behind": logged.offsets_behind}
    return asked.figures if isinstance(asked, requests.RebaseRequest) else {}


def is_observed(entry) -> bool:
    """Transitions of a stream and every step of a rebase; a first handoff is the handoff asset's own."""
    if entry.status not in OBSERVED:
        return False
    return entry.status != Status.HANDOFF_COMMITTED or details.of(entry).request_id is not None


def transition_metadata(entry, tables: Tables, start_offsets: dict[int, int] | None = None) -> dict:
    """An observation of `stream` for one handoff log entry (SWITCHED, CAUGHT_UP, REBASE_REQUESTED, ...)."""
    logged, asked = details.of(entry), requests.read(entry)
    progress = read_json(stream_dir(tables, entry.handoff_id) / "progress.json") or {}
    recorded = {key: value for key, value in recorded_figures(entry).items() if value is not None}
    figures = {**progress, **recorded}  # what the entry did not record, as the stream last saw it
    behind = figures.get("offsets_behind")
    start = start_offsets if start_offsets is not None else handoff_log.offsets(entry)
    return {
        "phase": str(entry.status),
        "handoff_id": entry.handoff_id,
        "at": dg.MetadataValue.timestamp(_utc(entry.at)),
        "start_offsets": dg.MetadataValue.json({str(p): o for p, o in sorted(start.items())}),
        "backlog_watermark": (dg.MetadataValue.timestamp(_utc(entry.backlog_watermark))
                              if entry.backlog_watermark else dg.MetadataValue.null()),
        "stream_watermark": figures.get("stream_watermark") or "",
        "offsets_behind": _number(_behind(behind) if isinstance(behind, dict) else behind),
        "input_rate": _number(figures.get("input_rows_per_s")),
        "processed_rate": _number(figures.get("processed_rows_per_s")),
        **_rebase_figures(logged, asked),
        "details": dg.MetadataValue.json(requests.as_details(asked) if asked else logged.as_details() if logged else {}),
    }
