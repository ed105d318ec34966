"""The monitor of one handoff's queries: the input's lag, CAUGHT_UP and FALLING_BEHIND, the switch back to the
batch path when the lag stays high, the rebase requests of other processes, and the progress cache that `status`
and the Dagster sensor read (reported through Pipes as well)."""

from __future__ import annotations

import os
import time

from switchyard.jobs.sinks import EventsSink
from switchyard.jobs.stream.group_offsets import ProcessedOffsets
from switchyard.jobs.stream.lag import LagDecisions
from switchyard.jobs.stream.options import COMMAND, StreamFailed, StreamResult
from switchyard.jobs.stream.queries import first_line, kafka_end_offsets, last_progress, query_error, stop_all
from switchyard.state_handoff.control import lease as leases
from switchyard.state_handoff.control import lifecycle
from switchyard.state_handoff.control.details import Failed, Lag
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.lost_offsets import behind_retention
from switchyard.state_handoff.control.requests import RebaseRequest, request_rebase
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.kafka_watch import LatestOffsets
from switchyard.state_handoff.language.avro_writers import UNSEEN, unseen_id
from switchyard.state_handoff.stream.layout import StreamPaths, prune_earlier_streams, write_json_atomically

# How Spark's Kafka source fails a query whose offsets Kafka's retention deleted (failOnDataLoss)
KAFKA_DATA_LOSS = "Some data may have been lost because they are not available in Kafka any more"


class Monitor:
    """Watches one handoff's queries and the input's lag; returns None on a stop, or the rebase to run.

    Only a failed query stops the stream (FAILED, exit 1). The monitor's own I/O (Kafka offsets, the log, the
    progress cache) fails soft: retried with backoff while the lag is reported as unknown. `supervisor`: the
    Supervisor that started the queries; the monitor logs through it and reads its settings, lease and signals."""

    def __init__(self, supervisor, handoff: Handoff, queries, events_sink: EventsSink):
        self.sup, self.handoff, self.queries, self.events_sink = supervisor, handoff, queries, events_sink
        self.settings = supervisor.settings
        self.paths = StreamPaths.of(supervisor.tables, handoff.handoff_id)
        self.result = StreamResult(handoff.handoff_id, reason="")
        self.lag_error: str | None = None
        self.lag_unknown_since: float | None = None
        self.next_lag_at = 0.0
        self.next_requests_at = 0.0
        self.backoff = self.settings.poll_seconds
        self.decisions = LagDecisions.of(self.settings, supervisor.last_switch_back)
        self.latest_offsets = LatestOffsets(supervisor.bootstrap)
        self.processed = ProcessedOffsets(supervisor.bootstrap, supervisor.pipeline.name, handoff.topic,
                                          supervisor.out)
        self.pruned = False  # the earlier handoffs' stream folders, once this one is live

    def log(self, status: str, **fields) -> None:
        self.sup.log(self.handoff.handoff_id, status, **fields)

    def run(self) -> RebaseRequest | None:
        try:
            return self._run()
        finally:
            self.latest_offsets.close()
            self.processed.close(time.monotonic())

    def _run(self) -> RebaseRequest | None:
        settings, result, handoff, sup = self.settings, self.result, self.handoff, self.sup
        logged = list(sup.view.entries)  # the turn's look: it orders every earlier handoff, for the prune
        switched = sup.switched_after_s is not None or lifecycle.has_switched(logged, handoff.handoff_id)
        result.switched_after_s = sup.switched_after_s  # when start() saw it
        lag, snapshot = {}, {}
        try:
            while True:
                sup.lease.check()
                self._raise_if_a_query_failed()
                if not switched and storage.exists(self.paths.keyed_checkpoint / "commits" / "0"):
                    switched = True
                    result.switched_after_s = sup.log_switched(handoff, time.monotonic())
                if switched and not self.pruned:
                    self.pruned = True
                    self._prune_earlier_streams(logged)
                now = time.monotonic()
                if now >= self.next_lag_at:
                    measured = self._measure_lag()
                    if measured is not None:
                        lag, snapshot = measured
                        result.lag = lag
                        self.processed.offer({p: snapshot["latest_offsets"][p] - n for p, n in lag.items()}, now)
                known = self.lag_error is None
                behind = sum(lag.values())
                phase = (self.decisions.phase(now, behind, snapshot.get("state_updates_behind", 0))
                         if known and switched else None)
                if phase == Status.CAUGHT_UP:
                    result.caught_up_after_s = result.caught_up_after_s or now - sup.started
                    self.log(Status.CAUGHT_UP, details=Lag(offsets_behind=lag, **snapshot))
                    sup.out(f"CAUGHT_UP after {now - sup.started:.1f}s: {behind} offsets behind latest")
                elif phase == Status.FALLING_BEHIND:
                    self.log(Status.FALLING_BEHIND, details=Lag(offsets_behind=lag, **snapshot))
                    sup.warn(f"FALLING_BEHIND: {behind} offsets behind latest")
                self._write_progress(lag if known else None, snapshot)
                if sup.stop_signal:
                    result.reason = sup.stop_signal[0]
                    return None
                if settings.until_caught_up and self.decisions.caught_up:
                    result.reason = "caught up"
                    return None
                if settings.for_seconds is not None and now - sup.started >= settings.for_seconds:
                    result.reason = f"ran {settings.for_seconds:g}s"
                    return None
                if known and switched:
                    switch_back = self._switch_back(now, behind, lag, snapshot)
                    if switch_back is not None and sup.may_pause(handoff, switch_back):
                        return switch_back
                if now >= self.next_requests_at:
                    self.next_requests_at = now + settings.requests_every_seconds
                    request = self._read_request()
                    if request is not None and sup.may_pause(handoff, request):  # refused: answered, streams on
                        return request
                time.sleep(settings.poll_seconds)
        except Exception as err:
            stop_all(self.queries)
            reason = query_error(err)
            try:
                if unseen_id(err) is None:  # an id to look for: jobs/stream/query_restarts.py logs FAILED if it is one
                    self.log(Status.FAILED, details=Failed(phase="stream", reason=reason))
            except Exception:  # the log is out of reach too; the exit code still says it
                pass
            if isinstance(err, (StreamFailed, leases.LeaseLost)):
                raise
            raise StreamFailed(f"the stream's supervisor failed: {reason}") from err

    def _prune_earlier_streams(self, logged: list) -> None:
        """This handoff is live: the seeds and checkpoints of earlier ones go (stream_layout.RUN_PARTS). A failure
        is reported and left for the next handoff's prune, which takes every earlier one. `logged`: the handoff log
        as this monitor began, which already orders every earlier handoff."""
        try:
            pruned = prune_earlier_streams(self.sup.tables, self.handoff.handoff_id, logged)
        except Exception as err:  # noqa: BLE001 - housekeeping: the stream goes on either way
            self.sup.warn(f"note: the stream folders of earlier handoffs were not pruned: {first_line(err)}")
            return
        if pruned:
            self.sup.out(f"pruned the seeds and checkpoints of {len(pruned)} earlier handoff(s): {', '.join(pruned)}")

    def _switch_back(self, now: float, behind: int, lag: dict, snapshot: dict) -> RebaseRequest | None:
        """Lag above the threshold for the hold time: rebase, since the sort-based batch path catches up
        faster than micro-batches. Hysteresis: after one, none again until caught up for a while."""
        decisions = self.decisions
        latest = snapshot.get("latest_offsets")
        decided = decisions.switch_back(now, behind, sum(latest.values()) if latest else None)
        if decisions.declined is not None:  # held off by its cost, said once while behind
            self.sup.out(f"not switching back: {decisions.declined.describe()}")
            decisions.declined = None
        if not decided:
            return None
        figures = {"offsets_behind": {str(p): n for p, n in lag.items()}, "behind": behind,
                   "behind_for_s": round(decisions.behind_for(now), 1), "threshold": decisions.switch_back_lag,
                   "processed_rows_per_s": snapshot.get("processed_rows_per_s"), "when": decisions.switch_back_when,
                   **({"estimate": decisions.estimate.as_details()}
                      if decisions.switch_back_when == "cost" and decisions.estimate else {})}
        asked = request_rebase(PipelineView.read(self.sup.tables), COMMAND, "switch back", figures=figures)
        self.sup.last_switch_back = decisions.last_switch_back
        because = (f": {decisions.estimate.describe()}" if decisions.switch_back_when == "cost" and decisions.estimate
                   else "")
        self.sup.out(f"SWITCH BACK: {behind} offsets behind for {decisions.behind_for(now):.0f}s "
                     f"(threshold {decisions.switch_back_lag}){because}: rebasing through the batch path")
        return PipelineView.read(self.sup.tables).ledger.open_rebase or asked

    def _read_request(self) -> RebaseRequest | None:
        """An open rebase request; a stop request (from any host) becomes a stop signal, read at the next round."""
        sup = self.sup
        try:
            ledger = PipelineView.read(sup.tables).ledger  # one look for both kinds of request
            stop = ledger.stop_for(sup.lease.lease_id)
            if stop is not None and not sup.stop_signal:
                sup.stop_signal.append(f"STOP_REQUESTED by {stop.who()}")
                return None
            return ledger.open_rebase
        except Exception as err:  # the log unreadable for a moment: ask again at the next poll
            sup.warn(f"could not read the handoff log: {first_line(err)}")
            return None

    def _raise_if_a_query_failed(self) -> None:
        for query in self.queries:
            if query.exception() is not None:
                unseen = unseen_id(query.exception())
                if unseen is not None:
                    raise StreamFailed(f"query {query.name} read a record of Avro schema id {unseen}, unknown when "
                                       f"it started ({UNSEEN} {unseen})")
                if KAFKA_DATA_LOSS in str(query.exception()):
                    raise StreamFailed(f"query {query.name} failed: "
                                       + behind_retention(self.sup.tables, self.handoff.topic, self.sup.bootstrap))
                raise StreamFailed(f"query {query.name} failed: {query_error(query.exception())}")
            if not query.isActive:
                raise StreamFailed(f"query {query.name} stopped unexpectedly")

    def _measure_lag(self) -> tuple[dict[int, int], dict] | None:
        try:
            measured = measure_lag(self.latest_offsets, self.handoff, self.queries, self.events_sink,
                                   self.sup.updates_topic, self.sup.updates_from)
        except Exception as err:  # a broker restarting, a network blip: the queries ride it out or fail themselves
            now = time.monotonic()
            if self.lag_error is None:
                self.lag_unknown_since = time.time()
                self.sup.warn(f"lag unknown: {first_line(err)}; retrying with backoff")
            self.lag_error = first_line(err)
            self.next_lag_at = now + self.backoff
            self.backoff = min(self.backoff * 2, 30.0)
            return None
        if self.lag_error is not None:
            self.sup.out(f"lag known again after {time.time() - self.lag_unknown_since:.0f}s")
        self.lag_error, self.lag_unknown_since, self.backoff = None, None, self.settings.poll_seconds
        return measured

    def _write_progress(self, lag: dict[int, int] | None, snapshot: dict) -> None:
        progress = {"pid": os.getpid(), "updated": time.time(), "handoff_id": self.handoff.handoff_id,
                    **snapshot, "offsets_behind": lag, "lag_error": self.lag_error,
                    "lag_unknown_since": self.lag_unknown_since}
        self.sup.report.progress(self.handoff.topic, self.sup.updates_topic, progress)
        try:
            write_json_atomically(self.paths.progress, progress)
        except OSError as err:  # a cache for status: the stream goes on without it
            self.lag_error = self.lag_error or f"progress file not written: {first_line(err)}"


def measure_lag(latest_offsets: LatestOffsets, handoff: Handoff, queries, events_sink: EventsSink, updates_topic: str,
                updates_from: dict[int, int]) -> tuple[dict[int, int], dict]:
    """Input offsets behind latest per partition, for the slower of the two readers, plus figures for status:
    among them the updates the state query has yet to apply."""
    keyed, events, state = (last_progress(q) for q in queries)  # each query's last progress
    newest = latest_offsets([handoff.topic, updates_topic])
    latest, updates_latest = newest[handoff.topic], newest[updates_topic]
    done = dict(handoff.start_offsets)
    committed = [kafka_end_offsets(progress, handoff.topic) or {} for progress in (keyed, events)]
    lag = {}
    for p, hi in latest.items():
        position = min(c.get(p, done.get(p, 0)) for c in committed)
        lag[p] = max(0, hi - position)
    applied = kafka_end_offsets(state, updates_topic) or updates_from
    state_behind = sum(max(0, hi - applied.get(p, 0)) for p, hi in updates_latest.items())
    last = events_sink.last
    return lag, {
        "latest_offsets": latest,
        "input_rows_per_s": events.get("inputRowsPerSecond"),
        "processed_rows_per_s": events.get("processedRowsPerSecond"),
        "last_batch_ms": (events.get("durationMs") or {}).get("triggerExecution"),
        "stream_watermark": last.watermark_after.isoformat() if last and last.watermark_after else None,
        "batch_id": events.get("batchId"),
        "update_batch_ms": (keyed.get("durationMs") or {}).get("triggerExecution"),
        "state_updates_behind": state_behind,
    }
