"""`switchyard serve`: a long-running home for pipelines' streams.

Each pipeline's stream runs as a child process (`switchyard stream`), started once the pipeline has a handoff and
nobody asked it to stop. What the service does is read from each pipeline's handoff log, so it steers the same
way whoever asks and from wherever (`switchyard stop`, `switchyard start`, the Dagster jobs):
- a stream that fails (any exit but 0, 2 and 75, a signal) starts again after a backoff that doubles; one that
  failed `limit` times within `window_s` seconds stays down and says why, until `switchyard start`;
- a stream that refuses (exit 2: the operator has to act, its last line says how) stays down until `switchyard
  start`;
- a stream that could not run for the moment (exit 75: Kafka, the registry or the lease unavailable) starts again
  after a backoff that doubles while it lasts, and is never held down for it: a broker away for an hour is waited
  out, and a standby service whose stream lost the lease to another's waits for that one to end;
- a stream a stop request ended stays stopped until `switchyard start`; a pipeline another process streams, or a
  rebase or backfill holds, is waited for;
- SIGTERM stops every stream cleanly (each drains and logs STOPPED), then the service.
The service serves every pipeline's metrics (jobs/metrics.py) and its own: restarts, and which streams it holds
down. The decisions (`Restarts`, `wanted`) are plain functions of the time and the log they are given, tested
without Spark.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from prometheus_client.core import GaugeMetricFamily, Metric

from switchyard.jobs.log import logger_of
from switchyard.jobs.stream.command import stream_command
from switchyard.state_handoff.control.requests import StartRequest
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import NOT_NOW, REFUSED
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

POLL_S = 1.0


@dataclass
class Restarts:
    """When a failed stream starts again: after `first_s` seconds, doubling with each failure up to `most_s`; once it
    has failed `limit` times within `window_s` seconds, not at all (None)."""

    limit: int = 5
    window_s: float = 600.0
    first_s: float = 1.0
    most_s: float = 60.0
    failures: list[float] = field(default_factory=list)
    unavailable: int = 0  # streams in a row that could not run for the moment

    def failed(self, now: float) -> float | None:
        self.unavailable = 0
        self.failures = [t for t in self.failures if now - t < self.window_s] + [now]
        if len(self.failures) >= self.limit:
            return None
        return min(self.most_s, self.first_s * 2 ** (len(self.failures) - 1))

    def not_now(self) -> float:
        """The wait before a stream that could not run for the moment (exit 75) starts again: doubling with each
        such exit in a row, up to `most_s`; never a hold-down, and no failure counted."""
        self.unavailable += 1
        return min(self.most_s, self.first_s * 2 ** (self.unavailable - 1))


def wanted(view: PipelineView, held_down_at_seq: int | None) -> str | None:
    """Why the pipeline's stream should not be started now, or None when it should. `view`: the pipeline, read
    now; `held_down_at_seq`: the log's last seq when the service held the stream down (a START_REQUESTED after it
    lifts that)."""
    if view.handoff is None:
        return "no handoff yet: waiting for `switchyard handoff`"
    owner = view.owner
    if owner is not None:
        return f"held by `{owner.command}` (pid {owner.owner_pid} on host {owner.owner_host}): waiting for it"
    if view.ledger.stop_in_force() is not None:
        return "stopped by a stop request: `switchyard start` runs it again"
    if held_down_at_seq is not None and view.ledger.newest_seq(StartRequest) <= held_down_at_seq:
        return "held down: `switchyard start` runs it again"
    return None


@dataclass
class Served:
    """One pipeline's stream as the service runs it; `ref`: what its stream process finds the pipeline by (a
    registered name or `module:NAME`, as the service was given it; None: its name)."""

    tables: Tables
    restarts: Restarts
    ref: str | None = None
    child: subprocess.Popen | None = None
    last_line: str = ""
    next_start: float = 0.0
    held_down_at_seq: int | None = None
    why_down: str | None = None
    started: int = 0

    @property
    def name(self) -> str:
        return self.tables.pipeline


class Service:
    """The streams of `pipelines`, each `switchyard stream ARGS` in a process group of its own."""

    def __init__(self, tables: list[Tables], bootstrap: str, stream_args: list[str], restarts: Callable[[], Restarts],
                 out=logger.info, refs: list[str] | None = None):
        self.served = [Served(t, restarts(), ref) for t, ref in zip(tables, refs or [None] * len(tables), strict=True)]
        self.bootstrap, self.stream_args, self.out = bootstrap, stream_args, out
        self.stopping = threading.Event()
        self._out_lock = threading.Lock()

    def say(self, line: str, level: int = logging.INFO, pipeline: str | None = None) -> None:
        """A line through `out`; when `out` is a logger's (the default), at `level`, a JSON line naming `pipeline`."""
        with self._out_lock:
            owner = logger_of(self.out)
            if owner is None:
                self.out(line)
            else:
                owner.log(level, line, extra={"pipeline": pipeline})

    def run(self) -> None:
        """Until `stop()`: start, watch and restart the streams; then stop them cleanly."""
        while not self.stopping.is_set():
            for one in self.served:
                try:
                    self._look_after(one)
                except Exception as err:  # the warehouse or Kafka unreachable a moment: the next look tries again
                    self.say(f"serve {one.name}: could not look at the pipeline: {err}", logging.WARNING, one.name)
            self.stopping.wait(POLL_S)
        for one in self.served:
            if one.child is not None and one.child.poll() is None:
                os.kill(one.child.pid, signal.SIGTERM)  # the stream process only: it drains its queries
        for one in self.served:
            if one.child is not None:
                one.child.wait()
                self.say(f"serve {one.name}: the stream stopped (exit {one.child.returncode})", pipeline=one.name)

    def stop(self) -> None:
        self.stopping.set()

    def _look_after(self, one: Served) -> None:
        now = time.monotonic()
        if one.child is not None:
            code = one.child.poll()
            if code is None:
                return
            one.child = None
            self._ended(one, code, now)
        if now < one.next_start:
            return
        why = wanted(PipelineView.read(one.tables), one.held_down_at_seq)
        if why is not None:
            if why != one.why_down:
                self.say(f"serve {one.name}: not streaming: {why}", pipeline=one.name)
            one.why_down = why
            return
        if one.held_down_at_seq is not None:  # lifted by a start request: its failures are forgiven
            one.restarts.failures.clear()
        one.held_down_at_seq = one.why_down = None
        self._start(one)

    def _ended(self, one: Served, code: int, now: float) -> None:
        if code == 0:
            self.say(f"serve {one.name}: the stream ended cleanly", pipeline=one.name)
            one.restarts.unavailable = 0
            one.next_start = now + one.restarts.first_s
            return
        if code == NOT_NOW:
            wait = one.restarts.not_now()
            one.next_start = now + wait
            self.say(f"serve {one.name}: the stream could not run for the moment (exit 75); starting it again in "
                     f"{wait:.0f}s: {one.last_line}", logging.WARNING, one.name)
            return
        seq = PipelineView.read(one.tables).last_seq
        if code == REFUSED:
            one.held_down_at_seq = seq
            self.say(f"serve {one.name}: the stream refused (exit 2), held down: {one.last_line}", logging.ERROR,
                     one.name)
            return
        wait = one.restarts.failed(now)
        if wait is None:
            one.held_down_at_seq = seq
            self.say(f"serve {one.name}: the stream failed {len(one.restarts.failures)} times within "
                     f"{one.restarts.window_s:.0f}s, held down (last exit {code}): {one.last_line}", logging.ERROR,
                     one.name)
            return
        one.next_start = now + wait
        self.say(f"serve {one.name}: the stream failed (exit {code}); starting it again in {wait:.0f}s",
                 logging.WARNING, one.name)

    def _start(self, one: Served) -> None:
        # its lines are relayed as lines of the service's own log: plain text, whatever format the service logs in
        command = stream_command(one.ref or one.name, one.tables.warehouse, self.bootstrap, log_format="text",
                                 extra_args=self.stream_args)
        one.child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)  # a signal to the service is its own to pass on
        one.started += 1
        self.say(f"serve {one.name}: stream started (pid {one.child.pid})", pipeline=one.name)
        threading.Thread(target=self._relay, args=(one, one.child), daemon=True).start()

    def _relay(self, one: Served, child: subprocess.Popen) -> None:
        for line in child.stdout:
            line = line.rstrip("\n")
            if line:
                one.last_line = line
                self.say(f"[{one.name}] {line}", pipeline=one.name)

    def collect(self) -> Iterator[Metric]:
        """The service's own metrics, beside the pipelines' (jobs/metrics.py)."""
        running = GaugeMetricFamily("switchyard_serve_stream_running", "1 while the service's stream process of the "
                                    "pipeline runs", labels=["pipeline"])
        starts = GaugeMetricFamily("switchyard_serve_stream_starts", "Stream processes the service has started "
                                   "for the pipeline (restarts are this minus 1)", labels=["pipeline"])
        down = GaugeMetricFamily("switchyard_serve_held_down", "1 while the service holds the pipeline's stream down "
                                 "after it refused or kept failing (`switchyard start` lifts it)", labels=["pipeline"])
        for one in self.served:
            running.add_metric([one.name], 1 if one.child is not None and one.child.poll() is None else 0)
            starts.add_metric([one.name], one.started)
            down.add_metric([one.name], 1 if one.held_down_at_seq is not None else 0)
        yield from (running, starts, down)
