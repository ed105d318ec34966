"""`switchyard stream` (isBacklog = false): the supervisor of a pipeline's live phase.

It owns the lifecycle: it holds the pipeline's lease, starts the three queries of the current handoff
(jobs/stream_keyed.py, jobs/stream_events.py, jobs/stream_state.py; each with its own checkpoint under
`_stream/<handoff>/checkpoints/`), logs the transitions (STREAM_STARTED, SWITCHED, CAUGHT_UP, FALLING_BEHIND,
STOPPED, FAILED), and rebases: when a REBASE_REQUESTED appears in the log (from `switchyard rebase` or a
`backfill` under the live stream) or the lag stays above the switch-back threshold, it pauses the queries at a
cut, runs the backlog phase up to it (jobs/rebase.py), and resumes with the new handoff in the same process.
Launched by Dagster, it reports its transitions and figures through Pipes as well (jobs/stream_pipes.py).

What a restart needs is in the checkpoints or in Delta (the handoff log, `stream_batches`); files beside the
checkpoints are caches for `status`. Every Delta write of a batch carries (txnAppId, txnVersion = batch id),
the app id naming the handoff and the incarnation of the query's checkpoint (jobs/delta_txn.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from dataclasses import dataclass, field

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from jobs import rebase
from jobs.delta_txn import TxnApp
from state_handoff.checkpoints import checkpoint_incarnation
from jobs.stream_events import SKIPPED_OVERLAP, EventsSink, ensure_tables, mark_overlap
from jobs.seed import seed_schema, write_seed
from jobs.stream_keyed import KeyedCrashPoint, kafka_records, keyed_input, keyed_updates, merged_state
from jobs.stream_pipes import Silent, reporting
from jobs.stream_state import StateTurn, StateSink, updates_start
from state_handoff import delta_upkeep, faults, handoff_log, lease as leases, storage, stream_progress
from state_handoff.errors import Failed, UserError
from state_handoff.handoff import Handoff, current_handoff
from state_handoff.kafka_io import LatestOffsets, create_topic, latest_offsets
from state_handoff.kafka_security import spark_options, spark_source_options
from state_handoff.step_times import StepTimes
from state_handoff.parsing import parse_events
from state_handoff.spec import Pipeline
from state_handoff.storage import Uri
from state_handoff.stream_layout import prune_earlier_streams, stream_dir, write_json_atomically
from state_handoff.tables import Tables

KEYED = "keyed"
COMMAND = "switchyard stream"
DEFAULT_STATE_PARTITIONS = 2  # what this 2-core machine always ran; raise it on a cluster


@dataclass
class StreamSettings:
    until_caught_up: bool = False
    for_seconds: float | None = None
    caught_up_lag: int = 0
    falling_behind_lag: int | None = None  # default: 10 x caught_up_lag, at least 1000
    max_offsets_per_trigger: int | None = 200_000
    trigger_seconds: float = 0.0
    # The Delta side (dead letters, late, windows, state from the updates topic) at most this often: fewer,
    # larger Delta commits leave the cores to the update path; a backlog still runs batches back to back.
    tables_trigger_seconds: float = 5.0
    poll_seconds: float = 0.5
    # Switch back: offsets behind above this for `switch_back_after` seconds rebase the stream (None: never).
    # A rebase costs a pause, one batch over the backlog and a seed: worth it only for a large backlog.
    switch_back_lag: int | None = 1_000_000
    switch_back_after: float = 30.0
    # Hysteresis: after a switch back, none again until the stream has been caught up this long.
    switch_back_hold: float = 120.0
    requests_every_seconds: float = 1.0
    # State-store partitions of a new checkpoint (one per handoff); None: SWITCHYARD_STATE_PARTITIONS, default 2.
    state_partitions: int | None = None

    def __post_init__(self):
        value = self.state_partitions if self.state_partitions is not None else \
            os.environ.get("SWITCHYARD_STATE_PARTITIONS", str(DEFAULT_STATE_PARTITIONS))
        if not str(value).isdigit() or int(value) < 1:
            raise UserError(f"state partitions (--state-partitions or SWITCHYARD_STATE_PARTITIONS) must be a whole "
                            f"number of at least 1, not {value!r}")
        self.state_partitions = int(value)

    @property
    def behind_threshold(self) -> int:
        return self.falling_behind_lag if self.falling_behind_lag is not None else max(10 * self.caught_up_lag, 1000)


@dataclass
class StreamPaths:
    """The handoff's stream folder (a local path or an object-store URL): the seed's files, one checkpoint per
    query, and caches for `status`."""

    root: Uri

    @property
    def seed(self) -> Uri:
        return self.root / "seed"

    @property
    def seed_written(self) -> Uri:
        """Spark's job commit writes `_SUCCESS` last: present means every seed file is in place."""
        return self.root / "seed" / "_SUCCESS"

    @property
    def keyed_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "keyed"

    @property
    def events_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "events"

    @property
    def state_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "state"

    @property
    def checkpoints(self) -> dict[str, Uri]:
        return {KEYED: self.keyed_checkpoint, stream_progress.EVENTS: self.events_checkpoint,
                stream_progress.STATE: self.state_checkpoint}

    @property
    def progress(self) -> Uri:
        return self.root / "progress.json"

    @staticmethod
    def of(tables: Tables, handoff_id: str) -> "StreamPaths":
        return StreamPaths(stream_dir(tables, handoff_id))


@dataclass
class StreamResult:
    handoff_id: str
    reason: str
    switched_after_s: float | None = None
    caught_up_after_s: float | None = None
    batches: int = 0
    lag: dict[int, int] = field(default_factory=dict)
    rebases: int = 0

    def summary(self, pipeline: str) -> str:
        parts = [f"stream {pipeline} {self.handoff_id} stopped ({self.reason})", f"{self.batches} event batches"]
        if self.switched_after_s is not None:
            parts.append(f"SWITCHED after {self.switched_after_s:.1f}s")
        if self.caught_up_after_s is not None:
            parts.append(f"CAUGHT_UP after {self.caught_up_after_s:.1f}s")
        if self.rebases:
            parts.append(f"{self.rebases} rebase{'s' if self.rebases > 1 else ''}")
        parts.append(f"offsets behind: {sum(self.lag.values())}")
        return "; ".join(parts)


class StreamFailed(Failed):
    """A query of the stream failed, or the supervisor could not go on: FAILED is in the log."""


def check_resumable(tables: Tables, handoff: Handoff, paths: StreamPaths, entries: list) -> None:
    """Refuse a checkpoint that is not the one whose writes Delta holds for this handoff: a lost or replaced
    checkpoint restarts batch ids, and replaying the handoff from its start would apply records twice."""
    recorded = stream_progress.incarnations(tables, handoff.handoff_id)
    switched = [e for e in entries if e.handoff_id == handoff.handoff_id and e.status == handoff_log.SWITCHED]
    if switched:  # the keyed query writes no Delta table; its first committed batch is in the log
        recorded[KEYED] = {handoff_log.details(e).get("keyed_incarnation") for e in switched}
    for query, incarnations in recorded.items():
        current = checkpoint_incarnation(paths.checkpoints[query])
        if current not in incarnations:
            state = "missing" if current is None else f"a new one ({current[:8]})"
            raise UserError(
                f"the {query} checkpoint of handoff {handoff.handoff_id} ({paths.checkpoints[query]}) is {state}, but "
                f"Delta already holds that handoff's stream writes: a stream cannot resume without the checkpoint "
                "that made them; restore it, or start over with `switchyard backfill` and `switchyard handoff`")


def run_stream(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str,
               settings: StreamSettings | None = None, out=print, lease: leases.Lease | None = None) -> StreamResult:
    """Stream the current handoff until a stop condition, across rebases; holds the pipeline's lease (takes it
    unless the caller passes the one it holds)."""
    settings = settings or StreamSettings()
    delta_upkeep.tidy_every()  # a bad SWITCHYARD_TIDY_EVERY stops the command here, not a query's batch
    if current_handoff(None, tables) is None:
        raise UserError(f"pipeline {pipeline.name} has no committed handoff: run `switchyard handoff` first")
    with reporting(tables, pipeline, bootstrap, out) as report:  # to Dagster, when it launched this process
        if lease is not None:
            return Supervisor(spark, pipeline, tables, bootstrap, settings, lease, out, report).run()
        with leases.hold(tables, COMMAND) as held:
            return Supervisor(spark, pipeline, tables, bootstrap, settings, held, out, report).run()


def checkpoint_conf(checkpoint: str) -> dict[str, str]:
    """How the stream's queries keep their checkpoints.

    A full RocksDB snapshot at each commit, not changelog files: Spark 4.0's streaming aggregation aborts its read
    store once the restore has read it (SPARK-46547), which for RocksDB drops the loaded version, so every batch
    reloads the store from the checkpoint. With changelog checkpointing that reload replays each changelog since
    the last snapshot the maintenance thread uploaded (once a minute); with a snapshot per commit it opens the
    latest one, whose files are already local. Spark 4.1 keeps the read store (SPARK-51955).

    On a local file system, checkpoint files through Hadoop's FileSystem rather than its FileContext: without
    Hadoop's native library, each FileContext rename forks `readlink` twice: the offset and commit logs took 66 and
    83 ms a batch, 17 and 16 ms after. FileSystem checks that a file is new, then renames, where FileContext renames
    without overwriting; the lease, not that rename, is what keeps a second driver off a checkpoint.
    """
    conf = {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false"}
    if not storage.is_object_store(checkpoint):
        conf["spark.sql.streaming.checkpointFileManagerClass"] = \
            "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"
    return conf


class Supervisor:
    """One handoff's queries at a time; between them, the rebases."""

    def __init__(self, spark, pipeline, tables, bootstrap, settings, lease, out, report=None):
        self.spark, self.pipeline, self.tables, self.bootstrap = spark, pipeline, tables, bootstrap
        self.settings, self.lease, self.out = settings, lease, out
        self.report = report or Silent()
        self.started = time.monotonic()
        self.startup = StepTimes(self.started)  # where the time to SWITCHED goes, for the SWITCHED entry
        self.stop_signal: list[str] = []
        self.last_switch_back: float | None = None
        self.switched_after_s: float | None = None  # this handoff's SWITCHED, once logged
        self.state_turn: StateTurn | None = None  # the running state query's turn (a drain hurries it)
        self.updates_from: dict[int, int] = {}  # where the running handoff's updates begin on the updates topic

    def log(self, handoff_id: str, status: str, **fields) -> None:
        handoff_log.append(self.spark, self.tables, handoff_id, status, **fields)
        self.report.logged(handoff_id, status)

    def run(self) -> StreamResult:
        previous = {sig: signal.signal(sig, lambda s, _f: self.stop_signal.append(signal.Signals(s).name))
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        result = None
        try:
            while True:
                handoff = current_handoff(None, self.tables)
                request = rebase.open_request(self.tables)
                if request is not None:  # asked for while no query ran, or a rebase a crash interrupted
                    self.rebase(handoff, request, queries=None)
                    continue
                queries, events_sink = self.start(handoff)
                monitor = Monitor(self, handoff, queries, events_sink)
                outcome = monitor.run()
                if result is not None:
                    monitor.result.rebases = result.rebases
                    monitor.result.switched_after_s = result.switched_after_s
                    monitor.result.caught_up_after_s = monitor.result.caught_up_after_s or result.caught_up_after_s
                result = monitor.result
                if outcome is None:
                    return self.stop(handoff, queries, result)
                self.rebase(handoff, outcome, queries)
                result.rebases += 1
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    # ------------------------------------------------------------ one handoff's queries

    def start(self, handoff: Handoff):
        spark, pipeline, tables, bootstrap = self.spark, self.pipeline, self.tables, self.bootstrap
        if self.startup.parts:  # a handoff after a rebase: its own step times
            self.startup = StepTimes(time.monotonic())
        self.switched_after_s = None
        step_done = self.startup.end
        paths = StreamPaths.of(tables, handoff.handoff_id)
        entries = handoff_log.entries(None, tables)
        check_resumable(tables, handoff, paths, entries)
        restart = storage.exists(paths.keyed_checkpoint)
        step_done("checks")
        write_seed(spark, pipeline, tables, handoff, paths)
        step_done("seed")
        ensure_tables(pipeline, tables)
        create_topic(bootstrap, pipeline.updates_topic, partitions=max(1, len(handoff.start_offsets)),
                     exist_ok=True, compacted=True)
        updates_from = updates_start(bootstrap, pipeline, handoff, paths, entries)
        self.updates_from = {int(p): int(o) for p, o in updates_from.items()}
        step_done("tables_and_topic")
        self.log(handoff.handoff_id, handoff_log.STREAM_STARTED, start_offsets=handoff.start_offsets,
                 backlog_watermark=handoff.backlog_watermark,
                 details={"pid": os.getpid(), "restart": restart, "topic": handoff.topic,
                          "updates_from": updates_from})
        self.out(f"stream {pipeline.name}: handoff {handoff.handoff_id}, "
                 f"{'resuming from checkpoint' if restart else 'seeding'} from state version {handoff.state_version}")
        step_done("stream_started_logged")

        # The state-store partitions are fixed by a query's first checkpoint and outlive this driver, so they come
        # from configuration, not from its cores (a handoff's new checkpoints take a changed value).
        spark.conf.set("spark.sql.shuffle.partitions", str(self.settings.state_partitions))
        for key, value in checkpoint_conf(paths.keyed_checkpoint).items():
            spark.conf.set(key, value)
        keyed, _, _ = self.start_readers(handoff, only=KEYED)
        step_done("keyed_started")
        if not any(e.handoff_id == handoff.handoff_id and e.status == handoff_log.SWITCHED for e in entries):
            self.await_first_batch(handoff, keyed, paths)
        _, events, events_sink = self.start_readers(handoff, only=stream_progress.EVENTS)
        # The updates topic is compacted: Kafka may drop a key's older updates, which only the newest matters for.
        updates = (spark.readStream.format("kafka").options(**spark_source_options(bootstrap))
                   .option("subscribe", pipeline.updates_topic).option("includeHeaders", "true")
                   .option("startingOffsets", json.dumps({pipeline.updates_topic: updates_from}))
                   .option("failOnDataLoss", "false").load())
        state_schema = spark.read.format("delta").load(tables.state).schema
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", "state")
        self.state_turn = StateTurn(self.tables_trigger_seconds())
        state = (updates.writeStream.queryName(f"{pipeline.name}-state")
                 .foreachBatch(StateSink(pipeline, tables, state_schema, handoff.handoff_id,
                                         TxnApp(f"{self.app_id(handoff)}-state", paths.state_checkpoint),
                                         self.state_turn))
                 .option("checkpointLocation", str(paths.state_checkpoint))
                 .trigger(**self.tables_trigger()).start())
        spark.sparkContext.setLocalProperty("spark.scheduler.pool", None)
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
        committed = handoff_log.latest(None, self.tables, handoff_log.HANDOFF_COMMITTED, handoff_id=handoff.handoff_id)
        request_id = handoff_log.details(committed).get("request_id") if committed else None
        paths = StreamPaths.of(self.tables, handoff.handoff_id)
        self.log(handoff.handoff_id, handoff_log.SWITCHED, start_offsets=handoff.start_offsets,
                 backlog_watermark=handoff.backlog_watermark,
                 details={"seconds_since_start": round(self.switched_after_s, 3), "startup_s": self.startup.parts,
                          "seconds_since_process_start": _since_process_start(seen_at),
                          "keyed_incarnation": checkpoint_incarnation(paths.keyed_checkpoint),
                          **({"request_id": request_id} if request_id else {})})
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
        """The keyed and events queries (or `only` one of them, the other None). `replay_only`: a trigger that
        fires once now and not again for hours, for a restart that should only complete the batch an
        interrupted run had planned (Spark replays it first, exactly as planned)."""
        spark, pipeline, tables, bootstrap, settings = (self.spark, self.pipeline, self.tables, self.bootstrap,
                                                        self.settings)
        paths = StreamPaths.of(tables, handoff.handoff_id)
        parsed = parse_events(pipeline, kafka_records(spark, bootstrap, handoff.topic, handoff.start_offsets,
                                                      settings.max_offsets_per_trigger,
                                                      with_key=handoff.overlap is not None))
        keyed_source = parsed
        if handoff.overlap is not None:
            parsed = mark_overlap(pipeline, parsed, spark.read.parquet(handoff.overlap.path), handoff.overlap)
            keyed_source = parsed.where(~F.col(SKIPPED_OVERLAP))
        once = {"processingTime": "6 hours"}
        context = spark.sparkContext
        keyed = events = None
        if only in (None, KEYED):
            seed = spark.readStream.schema(seed_schema(spark, str(paths.seed))).parquet(str(paths.seed))
            context.setLocalProperty("spark.scheduler.pool", "keyed")  # inherited by the queries' threads
            if faults.armed("stream.keyed.after_send") and not getattr(self, "_crash_listener", None):
                self._crash_listener = KeyedCrashPoint(f"{pipeline.name}-keyed")
                spark.streams.addListener(self._crash_listener)
            merged = merged_state(pipeline, keyed_input(pipeline, keyed_source).unionByName(seed))
            keyed = (keyed_updates(pipeline, merged, handoff.handoff_id)
                     .writeStream.queryName(f"{pipeline.name}-keyed").outputMode("update")
                     .format("kafka").options(**spark_options(bootstrap)).option("kafka.acks", "all")
                     .option("topic", pipeline.updates_topic)
                     .option("checkpointLocation", str(paths.keyed_checkpoint))
                     .trigger(**(once if replay_only else {"processingTime": f"{settings.trigger_seconds} seconds"}))
                     .start())
        events_sink = EventsSink(pipeline, tables, handoff,
                                 TxnApp(f"{self.app_id(handoff)}-events", paths.events_checkpoint))
        if only in (None, stream_progress.EVENTS):
            context.setLocalProperty("spark.scheduler.pool", "events")
            events = (parsed.writeStream.queryName(f"{pipeline.name}-events").foreachBatch(events_sink)
                      .option("checkpointLocation", str(paths.events_checkpoint))
                      .trigger(**(once if replay_only else self.tables_trigger())).start())
        context.setLocalProperty("spark.scheduler.pool", None)
        return keyed, events, events_sink

    def settle(self, handoff: Handoff, queries) -> None:
        """For a pause: stopping a reader may interrupt a batch half done (half its updates sent, half its Delta
        writes made). Restart each such reader alone until Spark has replayed that planned batch as planned,
        then stop it before it plans another; then drain `state`."""
        from jobs.rebase import last_committed_batch, last_planned_batch

        *readers, state = queries
        _stop(readers)
        paths = StreamPaths.of(self.tables, handoff.handoff_id)
        for name, checkpoint in ((KEYED, paths.keyed_checkpoint), (stream_progress.EVENTS, paths.events_checkpoint)):
            planned = last_planned_batch(checkpoint)
            if planned is None or planned == last_committed_batch(checkpoint):
                continue
            query = next(q for q in self.start_readers(handoff, only=name, replay_only=True)[:2] if q is not None)
            while last_committed_batch(checkpoint) != planned:
                if query.exception() is not None or not query.isActive:
                    raise StreamFailed(f"query {query.name} failed while pausing: "
                                       f"{_query_error(query.exception() or 'stopped')}")
                time.sleep(0.2)
            _stop([query])
        self.drain(handoff, [state])

    def stop(self, handoff: Handoff, queries, result: StreamResult) -> StreamResult:
        paths = StreamPaths.of(self.tables, handoff.handoff_id)
        _keep_recent_progress(queries, paths)
        self.drain(handoff, queries)
        result.batches = len(stream_progress.batches(self.tables, handoff.handoff_id))
        self.log(handoff.handoff_id, handoff_log.STOPPED, details={"reason": result.reason,
                                                                   "offsets_behind": result.lag})
        return result

    def drain(self, handoff: Handoff, queries) -> None:
        """Stop reading input, then let the state query apply every update already sent, then stop it."""
        *readers, state = queries
        _stop(readers)
        if self.state_turn is not None:
            self.state_turn.hurry.set()
        try:
            if not self._applied_every_update(state):
                state.processAllAvailable()  # waits for the query's next trigger, then for what it finds
            state.stop()
        except Exception as err:
            reason = f"applying the last updates to state: {_query_error(err)}"
            self.log(handoff.handoff_id, handoff_log.FAILED, details={"phase": "stream", "reason": reason})
            raise StreamFailed(reason) from None

    def _applied_every_update(self, state) -> bool:
        """The state query's last batch ended at the updates topic's end (the readers stopped, so nothing more
        comes), or, before its first batch in this process, no update was sent since the handoff's updates began:
        a drain has nothing to wait for. Unsure (Kafka unreachable): False.

        Without the second case, a stream stopped soon after its start (a bench's B at CAUGHT_UP, a short
        `--until-caught-up`) waited out the state query's first, cold batch over nothing: 4 s of a 10^7 bench."""
        topic = self.pipeline.updates_topic
        try:
            applied = _kafka_end_offsets(_last_progress(state), topic)
            ends = latest_offsets(self.bootstrap, [topic])[topic]
        except Exception:
            return False
        if applied is None:  # no batch yet: what it applied before this process is unknown, but not below the start
            if state.exception() is not None:
                return False  # a failed query: the wait reports its error
            applied = self.updates_from
        return all(applied.get(p, 0) >= hi for p, hi in ends.items())

    # ------------------------------------------------------------ the way back

    def rebase(self, handoff: Handoff, request: dict, queries) -> Handoff:
        """Drain the queries (when running), then the rebase: pause at a cut, backlog phase, handoff there."""
        started = time.monotonic()
        if queries is not None:
            self.settle(handoff, queries)
        new = rebase.run_rebase(self.spark, self.pipeline, self.tables, self.bootstrap, handoff, request,
                                out=self.out)
        self.out(f"rebase {self.pipeline.name}: handed off at the cut as {new.handoff_id} after "
                 f"{time.monotonic() - started:.1f}s; resuming")
        return new


class Monitor:
    """Watches one handoff's queries and the input's lag; returns None on a stop, or the rebase to run.

    Only a failed query stops the stream (FAILED, exit 1). The monitor's own I/O (Kafka offsets, the log, the
    progress cache) fails soft: retried with backoff while the lag is reported as unknown."""

    def __init__(self, supervisor: Supervisor, handoff: Handoff, queries, events_sink: EventsSink):
        self.sup, self.handoff, self.queries, self.events_sink = supervisor, handoff, queries, events_sink
        self.settings = supervisor.settings
        self.paths = StreamPaths.of(supervisor.tables, handoff.handoff_id)
        self.result = StreamResult(handoff.handoff_id, reason="")
        self.lag_error: str | None = None
        self.lag_unknown_since: float | None = None
        self.next_lag_at = 0.0
        self.next_requests_at = 0.0
        self.backoff = self.settings.poll_seconds
        self.behind_since: float | None = None
        self.caught_up_since: float | None = None
        self.latest_offsets = LatestOffsets(supervisor.bootstrap)
        self.pruned = False  # the earlier handoffs' stream folders, once this one is live

    def log(self, status: str, **fields) -> None:
        self.sup.log(self.handoff.handoff_id, status, **fields)

    def run(self) -> dict | None:
        try:
            return self._run()
        finally:
            self.latest_offsets.close()

    def _run(self) -> dict | None:
        settings, result, handoff, sup = self.settings, self.result, self.handoff, self.sup
        logged = handoff_log.entries(None, sup.tables)  # also the order of the earlier handoffs, for the prune
        switched = any(e.handoff_id == handoff.handoff_id and e.status == handoff_log.SWITCHED for e in logged)
        result.switched_after_s = sup.switched_after_s  # when start() saw it
        caught_up = False
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
                known = self.lag_error is None
                behind = sum(lag.values())
                state_current = snapshot.get("state_updates_behind", 0) <= settings.caught_up_lag
                if known and switched and not caught_up and behind <= settings.caught_up_lag and state_current:
                    caught_up = True
                    self.caught_up_since = now
                    result.caught_up_after_s = result.caught_up_after_s or now - sup.started
                    self.log(handoff_log.CAUGHT_UP, details={"offsets_behind": lag, **snapshot})
                    sup.out(f"CAUGHT_UP after {now - sup.started:.1f}s: {behind} offsets behind latest")
                elif known and caught_up and behind > settings.behind_threshold:
                    caught_up = False
                    self.caught_up_since = None
                    self.log(handoff_log.FALLING_BEHIND, details={"offsets_behind": lag, **snapshot})
                    sup.out(f"FALLING_BEHIND: {behind} offsets behind latest")
                self._write_progress(lag if known else None, snapshot)
                if sup.stop_signal:
                    result.reason = sup.stop_signal[0]
                    return None
                if settings.until_caught_up and caught_up:
                    result.reason = "caught up"
                    return None
                if settings.for_seconds is not None and now - sup.started >= settings.for_seconds:
                    result.reason = f"ran {settings.for_seconds:g}s"
                    return None
                if known and switched:
                    switch_back = self._switch_back(now, behind, lag, snapshot)
                    if switch_back is not None:
                        return switch_back
                if now >= self.next_requests_at:
                    self.next_requests_at = now + settings.requests_every_seconds
                    request = self._read_request()
                    if request is not None:
                        return request
                time.sleep(settings.poll_seconds)
        except Exception as err:
            _stop(self.queries)
            reason = _query_error(err)
            try:
                self.log(handoff_log.FAILED, details={"phase": "stream", "reason": reason})
            except Exception:  # the log is out of reach too; the exit code still says it
                pass
            if isinstance(err, (StreamFailed, leases.LeaseLost)):
                raise
            raise StreamFailed(f"the stream's supervisor failed: {reason}") from err

    def _prune_earlier_streams(self, logged: list) -> None:
        """This handoff is live: the seeds and checkpoints of earlier ones go (stream_control.RUN_PARTS). A failure
        is reported and left for the next handoff's prune, which takes every earlier one. `logged`: the handoff log
        as this monitor began, which already orders every earlier handoff."""
        try:
            pruned = prune_earlier_streams(self.sup.tables, self.handoff.handoff_id, logged)
        except Exception as err:  # noqa: BLE001 - housekeeping: the stream goes on either way
            self.sup.out(f"note: the stream folders of earlier handoffs were not pruned: {_first_line(err)}")
            return
        if pruned:
            self.sup.out(f"pruned the seeds and checkpoints of {len(pruned)} earlier handoff(s): {', '.join(pruned)}")

    def _switch_back(self, now: float, behind: int, lag: dict, snapshot: dict) -> dict | None:
        """Lag above the threshold for the hold time: rebase, since the sort-based batch path catches up
        faster than micro-batches. Hysteresis: after one, none again until caught up for a while."""
        settings = self.settings
        if settings.switch_back_lag is None or behind <= settings.switch_back_lag:
            self.behind_since = None
            return None
        self.behind_since = self.behind_since or now
        if now - self.behind_since < settings.switch_back_after:
            return None
        last = self.sup.last_switch_back
        if last is not None and (self.caught_up_since is None or now - self.caught_up_since < settings.switch_back_hold):
            return None
        figures = {"offsets_behind": {str(p): n for p, n in lag.items()}, "behind": behind,
                   "behind_for_s": round(now - self.behind_since, 1), "threshold": settings.switch_back_lag,
                   "processed_rows_per_s": snapshot.get("processed_rows_per_s")}
        request_id = rebase.request_rebase(self.sup.tables, "switch back", COMMAND, figures=figures)
        self.sup.last_switch_back = now
        self.sup.out(f"SWITCH BACK: {behind} offsets behind for {now - self.behind_since:.0f}s "
                     f"(threshold {settings.switch_back_lag}): rebasing through the batch path")
        return rebase.open_request(self.sup.tables) or {"request_id": request_id}

    def _read_request(self) -> dict | None:
        try:
            return rebase.open_request(self.sup.tables)
        except Exception as err:  # the log unreadable for a moment: ask again at the next poll
            self.sup.out(f"could not read the handoff log: {_first_line(err)}")
            return None

    def _raise_if_a_query_failed(self) -> None:
        for query in self.queries:
            if query.exception() is not None:
                raise StreamFailed(f"query {query.name} failed: {_query_error(query.exception())}")
            if not query.isActive:
                raise StreamFailed(f"query {query.name} stopped unexpectedly")

    def _measure_lag(self) -> tuple[dict[int, int], dict] | None:
        try:
            measured = _lag(self.latest_offsets, self.sup.pipeline, self.handoff, self.queries, self.events_sink,
                            self.sup.updates_from)
        except Exception as err:  # a broker restarting, a network blip: the queries ride it out or fail themselves
            now = time.monotonic()
            if self.lag_error is None:
                self.lag_unknown_since = time.time()
                self.sup.out(f"lag unknown: {_first_line(err)}; retrying with backoff")
            self.lag_error = _first_line(err)
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
        self.sup.report.progress(self.handoff.topic, progress)
        try:
            write_json_atomically(self.paths.progress, progress)
        except OSError as err:  # a cache for status: the stream goes on without it
            self.lag_error = self.lag_error or f"progress file not written: {_first_line(err)}"


def _process_age() -> float | None:
    """Seconds since this process began (its JVM start included), from /proc; None where there is none."""
    try:
        started_ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
        uptime = float(open("/proc/uptime").read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - started_ticks / os.sysconf("SC_CLK_TCK"), 3)


def _since_process_start(at: float) -> float | None:
    """Seconds from this process's start to the monotonic time `at` (a moment ago)."""
    age = _process_age()
    return None if age is None else round(age - (time.monotonic() - at), 3)


def _first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def _query_error(err) -> str:
    """The cause, when a foreachBatch function raised it: the last `SomeError: message` line of the Python
    traceback Spark wraps; else the exception's first line."""
    causes = [line.strip() for line in str(err).splitlines()
              if re.match(r"^\s*[A-Za-z_.]*(Error|Exception|Failed|Lost): ", line)]
    return causes[-1][:300] if causes else _first_line(err)


def _keep_recent_progress(queries, paths: StreamPaths) -> None:
    """Each query's last batches (rows, per-phase durations) beside the checkpoints, for where the time goes."""
    try:
        history = {q.name: [{"batch_id": p["batchId"], "rows": p["numInputRows"], "duration_ms": p["durationMs"]}
                            for p in _recent_progress(q)] for q in queries}
        write_json_atomically(paths.root / "recent_progress.json", history)
    except Exception:  # a diagnostic: never what keeps a stop from draining and logging STOPPED
        pass


def _recent_progress(query) -> list[dict]:
    """`query.recentProgress` in one call to the JVM: PySpark's asks for each batch's JSON in turn, which took 2.8 s
    for three queries' hundred batches at a stop. Scala prints an array as `Array(a, b)` with each element's
    toString, a progress's JSON."""
    from pyspark import SparkContext

    printed = SparkContext._jvm.scala.runtime.ScalaRunTime.stringOf(query._jsq.recentProgress())
    return json.loads("[" + printed.removeprefix("Array(").removesuffix(")") + "]")


def _stop(queries) -> None:
    for query in queries:
        try:
            query.stop()
        except Exception:  # already failed; its error is what gets reported
            pass


def _last_progress(query) -> dict:
    """`query.lastProgress` as a dict ({} before the first batch), in two calls to the JVM. PySpark's builds its
    object getter by getter, and each Java collection it iterates ends in an exception that PySpark's error handler
    inspects with a dozen reflective lookups, most of them class names searched for in every jar: 324 lookups a
    call, which with the monitor's five calls a poll kept an idle stream's driver at half a core."""
    progress = query._jsq.lastProgress()
    return json.loads(progress.json()) if progress is not None else {}


def _kafka_end_offsets(progress: dict, topic: str) -> dict[int, int] | None:
    """A query's Kafka end offsets of `topic` from its last progress (None before its first batch)."""
    for source in progress.get("sources", []):
        if source["description"].startswith("KafkaV2"):
            end = source["endOffset"]
            end = json.loads(end) if isinstance(end, str) else end
            return {int(p): int(o) for p, o in (end or {}).get(topic, {}).items()}
    return None


def _lag(latest_offsets: LatestOffsets, pipeline: Pipeline, handoff: Handoff, queries, events_sink: EventsSink,
         updates_from: dict[int, int]) -> tuple[dict[int, int], dict]:
    """Input offsets behind latest per partition, for the slower of the two readers, plus figures for status:
    among them the updates the state query has yet to apply."""
    keyed, events, state = (_last_progress(q) for q in queries)  # each query's last progress
    newest = latest_offsets([handoff.topic, pipeline.updates_topic])
    latest, updates_latest = newest[handoff.topic], newest[pipeline.updates_topic]
    done = dict(handoff.start_offsets)
    committed = [_kafka_end_offsets(progress, handoff.topic) or {} for progress in (keyed, events)]
    lag = {}
    for p, hi in latest.items():
        position = min(c.get(p, done.get(p, 0)) for c in committed)
        lag[p] = max(0, hi - position)
    applied = _kafka_end_offsets(state, pipeline.updates_topic) or updates_from
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
