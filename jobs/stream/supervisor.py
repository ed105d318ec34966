"""The supervisor of a pipeline's live phase (`switchyard stream`, isBacklog = false): it owns the lifecycle.

It holds the pipeline's lease, starts the three queries of the current handoff (keyed.py, events.py, state.py;
each with its own checkpoint, state_handoff/stream/layout.py), logs the transitions (STREAM_STARTED, SWITCHED,
STOPPED, FAILED; the monitor logs CAUGHT_UP and FALLING_BEHIND), and rebases: when a REBASE_REQUESTED appears in
the log (from `switchyard rebase` or a `backfill` under the live stream) or the lag stays above the switch-back
threshold, it pauses the queries at a cut, runs the backlog phase up to it (jobs/rebase/run.py), and resumes with the
new handoff in the same process. Launched by Dagster, it reports its transitions and figures through Pipes as
well (pipes.py).

What a restart needs is in the checkpoints or in Delta (the handoff log, `stream_batches`); files beside the
checkpoints are caches for `status`. Every Delta write of a batch carries (txnAppId, txnVersion = batch id),
the app id naming the handoff and the incarnation of the query's checkpoint (jobs/delta_txn.py).
"""

from __future__ import annotations

import logging
import os
import signal
import time

from pyspark.sql import SparkSession

from switchyard.deploy.spark import check_classic
from switchyard.jobs.delta_txn import TxnApp
from switchyard.jobs.log import warnings_to
from switchyard.jobs.rebase import checks as rebase_checks
from switchyard.jobs.rebase import requests as rebase_requests
from switchyard.jobs.rebase import run as rebase
from switchyard.jobs.seed import version_base, write_seed
from switchyard.jobs.sinks import EventsSink, ensure_tables
from switchyard.jobs.stream.events import added_partitions, parsed_input, start_events_query
from switchyard.jobs.stream.keyed import KeyedCrashPoint, start_keyed_query
from switchyard.jobs.stream.monitor import Monitor
from switchyard.jobs.stream.options import COMMAND, StreamFailed, StreamOptions, StreamResult
from switchyard.jobs.stream.pipes import Silent, reporting
from switchyard.jobs.stream.queries import checkpoint_conf, keep_recent_progress, query_error, stop_all
from switchyard.jobs.stream.query_restarts import may_start_again
from switchyard.jobs.stream.resume_checks import check_resumable, check_spark_line
from switchyard.jobs.stream.state import StateTurn, applied_every_update, start_state_query, updates_start
from switchyard.jobs.stream.updates_topic import updates_topic
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, handoff_log, lifecycle, processes
from switchyard.state_handoff.control import lease as leases
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.lost_offsets import refuse_if_expired
from switchyard.state_handoff.control.requests import RebaseRequest
from switchyard.state_handoff.control.step_times import StepTimes
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep, storage
from switchyard.state_handoff.io.kafka_io import create_topic
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.stream.checkpoints import checkpoint_incarnation, last_committed_batch, last_planned_batch
from switchyard.state_handoff.stream.layout import KEYED, StreamPaths
from switchyard.state_handoff.stream.progress import EVENTS
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def run_stream(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str,
               settings: StreamOptions | None = None, out=logger.info,
               lease: leases.Lease | None = None, stop_signal: list[str] | None = None) -> StreamResult:
    """Stream the current handoff until a stop condition, across rebases; holds the pipeline's lease (takes it
    unless the caller passes the one it holds). `stop_signal`: the signals the caller's handler recorded since the
    process began (a SIGTERM during the JVM's start is obeyed, not lost); the stream adds those it receives."""
    check_classic(spark)  # a Spark Connect session a library caller handed in: refused before the lease
    settings = settings or StreamOptions()
    delta_upkeep.tidy_every()  # a bad SWITCHYARD_TIDY_EVERY stops the command here, not a query's batch
    if PipelineView.read(tables).handoff is None:  # the one look before the lease; each turn looks again
        raise UserError(f"pipeline {pipeline.name} has no committed handoff: run `switchyard handoff` first")
    with reporting(tables, pipeline, bootstrap, out) as report:  # to Dagster, when it launched this process
        if lease is not None:
            return Supervisor(spark, pipeline, tables, bootstrap, settings, lease, out, report, stop_signal).run()
        with leases.hold(tables, COMMAND) as held:
            return Supervisor(spark, pipeline, tables, bootstrap, settings, held, out, report, stop_signal).run()


def stream_until_caught_up(pipeline: Pipeline, tables: Tables, bootstrap: str, out=logger.info):
    """`switchyard stream --until-caught-up` as a function of the session: what an offline rebase runs first over a
    stream killed without a stop (jobs/rebase/run.py, `rebase_pipeline`'s `finish_stream`)."""
    return lambda spark: run_stream(spark, pipeline, tables, bootstrap, StreamOptions(until_caught_up=True),
                                    out=out)


class Supervisor:
    """One handoff's queries at a time; between them, the rebases."""

    def __init__(self, spark, pipeline, tables, bootstrap, settings, lease, out, report=None, stop_signal=None):
        self.spark, self.pipeline, self.tables, self.bootstrap = spark, pipeline, tables, bootstrap
        self.settings, self.lease, self.out = settings, lease, out
        self.warn = warnings_to(out)  # notes and retries: a warning in the command's log
        self.report = report or Silent()
        self.started = time.monotonic()
        self.startup = StepTimes(self.started)  # where the time to SWITCHED goes, for the SWITCHED entry
        self.stop_signal: list[str] = stop_signal if stop_signal is not None else []
        self.last_switch_back: float | None = None
        self.switched_after_s: float | None = None  # this handoff's SWITCHED, once logged
        self.state_turn: StateTurn | None = None  # the running state query's turn (a drain hurries it)
        self.updates_topic = ""  # the running handoff's (jobs/stream/updates_topic.py)
        self.updates_from: dict[int, int] = {}  # where the running handoff's updates begin on the updates topic
        self.added_partitions: dict[int, int] = {}  # partitions the topic gained after the running handoff: start
        self._crash_listener: KeyedCrashPoint | None = None  # registered once, while a crash point is armed
        self.checkpoint_races = 0  # queries started again after another driver wrote their checkpoint
        self.conf_before: dict[str, str | None] = {}  # the session's settings before the stream set its own
        self.view: PipelineView | None = None  # the pipeline as this turn read it, once: what its steps decide from
        self.handoff_request: str | None = None  # the rebase request the running handoff answered, for SWITCHED

    def log(self, handoff_id: str, status: str, **fields) -> None:
        handoff_log.append(self.tables, handoff_id, status, **fields)
        self.report.logged(handoff_id, status)

    def run(self) -> StreamResult:
        previous = {sig: signal.signal(sig, lambda s, _f: self.stop_signal.append(signal.Signals(s).name))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        result = None
        try:
            while True:
                if self.stop_signal:  # before a turn starts any query (the first, or the one after a rebase)
                    self.out(f"stream {self.pipeline.name}: {self.stop_signal[0]} before the queries started: "
                             "nothing started, nothing to drain")
                    return result or StreamResult("(no queries started)", reason=self.stop_signal[0])
                self.view = view = PipelineView.read(self.tables)  # one look per turn
                handoff = view.current_handoff
                request = view.ledger.open_rebase
                if request is not None:  # asked for while no query ran, or a rebase a crash interrupted
                    rebase_requests.refuse_if_failing(view, request)
                    if request.paused is not None or rebase_requests.unsettled_stream(view) is None:
                        self.rebase(handoff, request, queries=None)
                    elif self.may_pause(handoff, request):  # refused and answered otherwise
                        # a stream killed without a stop: its queries run again, so the pause settles them
                        self.rebase(handoff, request, self.start(handoff)[0])
                    continue  # rebased, or refused (before its pause, or by its reconciliation): streams on
                try:
                    queries, events_sink = self.start(handoff)
                    monitor = Monitor(self, handoff, queries, events_sink)
                    outcome = monitor.run()
                except StreamFailed as err:
                    if not may_start_again(self, handoff, err):
                        raise
                    continue
                if result is not None:
                    monitor.result.rebases = result.rebases
                    monitor.result.switched_after_s = result.switched_after_s
                    monitor.result.caught_up_after_s = monitor.result.caught_up_after_s or result.caught_up_after_s
                result = monitor.result
                if outcome is None:
                    return self.stop(handoff, queries, result)
                if self.rebase(handoff, outcome, queries) is not None:
                    result.rebases += 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self.restore_conf()

    def set_conf(self, conf: dict[str, str]) -> None:
        """Set the session's settings the queries start with (each query runs on a copy of the session taken at its
        start); the session gets its own back when the stream ends, for the process that owns it."""
        for key, value in conf.items():
            self.conf_before.setdefault(key, self.spark.conf.get(key, None))
            self.spark.conf.set(key, value)

    def restore_conf(self) -> None:
        for key, value in self.conf_before.items():
            if value is None:
                self.spark.conf.unset(key)
            else:
                self.spark.conf.set(key, value)
        self.conf_before.clear()

    # ------------------------------------------------------------ one handoff's queries

    def start(self, handoff: Handoff):
        spark, pipeline, tables, bootstrap = self.spark, self.pipeline, self.tables, self.bootstrap
        if self.startup.parts:  # a handoff after a rebase: its own step times
            self.startup = StepTimes(time.monotonic())
        self.switched_after_s = None
        step_done = self.startup.end
        paths = StreamPaths.of(tables, handoff.handoff_id)
        entries = list(self.view.entries)
        committed = self.view.latest(Status.HANDOFF_COMMITTED, handoff.handoff_id)
        self.handoff_request = details.of(committed).request_id if committed else None
        check_resumable(tables, handoff, paths, entries)
        check_spark_line(pipeline.name, handoff, paths, entries, spark.version)
        restart = storage.exists(paths.keyed_checkpoint)
        if not restart:  # a first start: Kafka must still hold where the handoff starts
            refuse_if_expired(tables, handoff, bootstrap)
        self.added_partitions = added_partitions(bootstrap, handoff, fresh=not restart)
        step_done("checks")
        write_seed(spark, pipeline, tables, handoff, paths)
        step_done("seed")
        ensure_tables(pipeline, tables)
        self.updates_topic = updates_topic(pipeline, tables, handoff.handoff_id, entries)
        if self.updates_topic == handoff.topic:
            raise UserError(f"the updates topic is {self.updates_topic}, the pipeline's input topic: the stream would "
                            "read its own updates as events; name another with SWITCHYARD_UPDATES_TOPIC")
        create_topic(bootstrap, self.updates_topic, partitions=max(1, len(handoff.start_offsets)),
                     exist_ok=True, compacted=True)
        updates_from = updates_start(bootstrap, pipeline, handoff, self.updates_topic, paths, entries)
        self.updates_from = {int(p): int(o) for p, o in updates_from.items()}
        step_done("tables_and_topic")
        self.log(handoff.handoff_id, Status.STREAM_STARTED, start_offsets=handoff.start_offsets,
                 backlog_watermark=handoff.backlog_watermark,
                 details=details.StreamStarted(
                     pid=os.getpid(), restart=restart, topic=handoff.topic, spark_version=spark.version,
                     updates_topic=self.updates_topic, updates_from=updates_from,
                     added_partitions={str(p): o for p, o in self.added_partitions.items()} or None))
        self.out(f"stream {pipeline.name}: handoff {handoff.handoff_id}, "
                 f"{'resuming from checkpoint' if restart else 'seeding'} from state version {handoff.state_version}")
        step_done("stream_started_logged")

        # The state-store partitions are fixed by a query's first checkpoint and outlive this driver, so they come
        # from configuration, not from its cores (a handoff's new checkpoints take a changed value).
        self.set_conf({"spark.sql.shuffle.partitions": str(self.settings.state_partitions),
                       **checkpoint_conf(paths.keyed_checkpoint)})
        keyed, _, _ = self.start_readers(handoff, only=KEYED)
        step_done("keyed_started")
        if not lifecycle.has_switched(entries, handoff.handoff_id):
            self.await_first_batch(handoff, keyed, paths)
        _, events, events_sink = self.start_readers(handoff, only=EVENTS)
        self.state_turn = StateTurn(self.tables_trigger_seconds())
        state = start_state_query(spark, pipeline, tables, bootstrap, handoff.handoff_id, self.updates_topic,
                                  updates_from, paths,
                                  TxnApp(f"{self.app_id(handoff)}-state", paths.state_checkpoint), self.state_turn,
                                  self.tables_trigger())
        step_done("other_queries_started")
        return (keyed, events, state), events_sink

    def await_first_batch(self, handoff: Handoff, keyed, paths: StreamPaths, timeout_s: float = 120.0) -> None:
        """A new handoff's first keyed batch (the seed, and the updates of the first input) has the cores to itself:
        the Delta-writing queries start once it committed (SWITCHED), a failure, a stop signal, or `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not storage.exists(paths.keyed_checkpoint / "commits" / "0"):
            if not keyed.isActive or self.stop_signal or time.monotonic() > deadline:
                return
            time.sleep(0.05)
        self.log_switched(handoff, time.monotonic())

    def log_switched(self, handoff: Handoff, seen_at: float) -> float:
        """SWITCHED: the keyed query's first batch, the seed with it, was seen committed at `seen_at`; returns the
        seconds since this handoff's start."""
        self.switched_after_s = seen_at - self.started
        self.startup.end("first_batch")
        paths = StreamPaths.of(self.tables, handoff.handoff_id)
        self.log(handoff.handoff_id, Status.SWITCHED, start_offsets=handoff.start_offsets,
                 backlog_watermark=handoff.backlog_watermark,
                 details=details.Switched(
                     seconds_since_start=round(self.switched_after_s, 3), startup_s=self.startup.parts,
                     seconds_since_process_start=processes.since_start(seen_at),
                     keyed_incarnation=checkpoint_incarnation(paths.keyed_checkpoint),
                     request_id=self.handoff_request))
        self.out(f"SWITCHED after {self.switched_after_s:.1f}s: the first batch with the seed has committed "
                 f"({self.startup.describe()})")
        return self.switched_after_s

    def app_id(self, handoff: Handoff) -> str:
        return f"switchyard-{self.pipeline.name}-{handoff.handoff_id}"

    def tables_trigger_seconds(self) -> float:
        return max(self.settings.trigger_seconds, self.settings.tables_trigger_seconds)

    def tables_trigger(self) -> dict:
        return {"processingTime": f"{self.tables_trigger_seconds()} seconds"}

    def start_readers(self, handoff: Handoff, only: str | None = None, replay_only: bool = False):
        """The keyed and events queries (or `only` one of them, the other None), and the events sink. `replay_only`:
        Spark's once trigger, for a restart that should only complete the batch an interrupted run had planned (a
        restarted query runs the planned batch first, exactly as planned; once runs that one and ends)."""
        spark, pipeline, tables, bootstrap, settings = (self.spark, self.pipeline, self.tables, self.bootstrap,
                                                        self.settings)
        paths = StreamPaths.of(tables, handoff.handoff_id)
        parsed, keyed_source = parsed_input(spark, pipeline, bootstrap, handoff, settings.max_offsets_per_trigger,
                                            self.added_partitions)
        once = {"once": True}
        keyed = events = None
        if only in (None, KEYED):
            if faults.armed("stream.keyed.after_send") and self._crash_listener is None:
                self._crash_listener = KeyedCrashPoint(f"{pipeline.name}-keyed")
                spark.streams.addListener(self._crash_listener)
            keyed = start_keyed_query(spark, pipeline, bootstrap, handoff.handoff_id, self.updates_topic, paths,
                                      keyed_source,
                                      once if replay_only else {"processingTime": f"{settings.trigger_seconds} seconds"},
                                      version_base(handoff.committed_at))
        events_sink = EventsSink(pipeline, tables, handoff,
                                 TxnApp(f"{self.app_id(handoff)}-events", paths.events_checkpoint))
        if only in (None, EVENTS):
            events = start_events_query(spark, pipeline, parsed, events_sink, paths,
                                        once if replay_only else self.tables_trigger())
        return keyed, events, events_sink

    def settle(self, handoff: Handoff, queries) -> None:
        """For a pause or a stop: stopping a reader may interrupt a batch half done (half its updates sent, half its
        Delta writes made). The keyed query's is replayed, so that `state` and the keyed checkpoint end at the same
        batch (a rebase or redeploy folds from that checkpoint's end): restarted alone until Spark has replayed that
        planned batch as planned, then stopped before it plans another; then `state` drains. The events query's is
        left to the next start of the stream, or to a rebase's catch-up, which completes it over its planned range
        with the stream's own transaction ids (jobs/rebase/cut.py): replaying it here cost a pause as much again."""
        *readers, state = queries
        times = StepTimes()
        stop_all(readers)
        times.end("readers_stopped")
        checkpoint = StreamPaths.of(self.tables, handoff.handoff_id).keyed_checkpoint
        planned = last_planned_batch(checkpoint)
        if planned is not None and planned != last_committed_batch(checkpoint):
            query = self.start_readers(handoff, only=KEYED, replay_only=True)[0]
            def replayed() -> bool:  # at or past the planned batch: a loop on `!=` could wait past it forever
                committed = last_committed_batch(checkpoint)
                return committed is not None and committed >= planned

            while not replayed():
                if query.exception() is not None or (not query.isActive and not replayed()):
                    raise StreamFailed(f"query {query.name} failed replaying its interrupted batch: "
                                       f"{query_error(query.exception() or 'stopped')}")
                time.sleep(0.2)
            stop_all([query])
            times.end(f"keyed_batch_{planned}_replayed")
        self.drain(handoff, [state])
        times.end("state_drained")
        self.out(f"settled the queries of {handoff.handoff_id} in {sum(times.parts.values()):.1f}s: {times.describe()}")

    def stop(self, handoff: Handoff, queries, result: StreamResult) -> StreamResult:
        """A stop: the queries settled (`settle`), then STOPPED."""
        paths = StreamPaths.of(self.tables, handoff.handoff_id)
        keep_recent_progress(queries, paths)
        self.settle(handoff, queries)
        result.batches = len(stream_progress.batches(self.tables, handoff.handoff_id))
        self.log(handoff.handoff_id, Status.STOPPED, details=details.Stopped(reason=result.reason,
                                                                             offsets_behind=result.lag))
        return result

    def drain(self, handoff: Handoff, queries) -> None:
        """Stop reading input, then let the state query apply every update already sent, then stop it."""
        *readers, state = queries
        stop_all(readers)
        if self.state_turn is not None:
            self.state_turn.hurry.set()
        try:
            if not applied_every_update(state, self.bootstrap, self.updates_topic, self.updates_from):
                state.processAllAvailable()  # waits for the query's next trigger, then for what it finds
            state.stop()
        except Exception as err:
            reason = f"applying the last updates to state: {query_error(err)}"
            self.log(handoff.handoff_id, Status.FAILED, details=details.Failed(phase="stream", reason=reason))
            raise StreamFailed(reason) from None

    # ------------------------------------------------------------ the way back

    def may_pause(self, handoff: Handoff, request: RebaseRequest) -> bool:
        """A request the monitor read, checked while the queries still run: False when the rebase could not read
        what it needs (refused and answered, REBASE_REFUSED): the queries stream on."""
        if request.paused is not None:
            return True
        try:
            rebase_checks.refuse_unless_ready(self.tables, self.bootstrap, handoff, request)
        except rebase_checks.RebaseRefused as refused:
            self.refused(handoff, refused)
            return False
        return True

    def refused(self, handoff: Handoff, refused: rebase_checks.RebaseRefused) -> None:
        self.report.logged(handoff.handoff_id, Status.REBASE_REFUSED)
        self.warn(f"REBASE_REFUSED: {refused}")

    def rebase(self, handoff: Handoff, request: RebaseRequest, queries) -> Handoff | None:
        """Drain the queries (when running), then the rebase: pause at a cut, backlog phase, handoff there. None
        when it was refused before its pause, or its reconciliation refused it with nothing replaced: the same
        handoff streams on."""
        started = time.monotonic()
        if queries is not None:
            self.settle(handoff, queries)
        try:
            new = rebase.run_rebase(self.spark, self.pipeline, self.tables, self.bootstrap, handoff, request,
                                    out=self.out, checked=queries is not None,  # the monitor checked: may_pause
                                    stop_asked=lambda: bool(self.stop_signal))
        except rebase.RebaseInterrupted as stopped:  # a stop signal between its steps: the next stream finishes it
            self.out(f"rebase {self.pipeline.name}: {self.stop_signal[0]}: {stopped}; the next `switchyard stream` "
                     "finishes it there")
            return None
        except rebase_checks.RebaseRefused as refused:
            self.refused(handoff, refused)
            return None
        except rebase.ReconciliationFailed as refused:
            if not refused.resumable:
                raise
            self.warn(f"RECONCILIATION_FAILED: {refused}; streaming on from handoff {handoff.handoff_id}")
            return None
        self.out(f"rebase {self.pipeline.name}: handed off at the cut as {new.handoff_id} after "
                 f"{time.monotonic() - started:.1f}s; resuming")
        return new

