"""The stream's reports to Dagster through Pipes, when Dagster launched it (orchestration/stream_launch.py).

Each handoff log entry after the launch goes out as it is logged (the stream's transitions, and the steps of its
rebases, which jobs/rebase/run.py logs), and the lag, rates, update latency and watermark at each transition and
every `FIGURES_EVERY_S`. dagster-pipes reports materializations and checks but no observations, so these are
custom messages; the orchestration side turns them into observations of `stream`. A detached stream closes its
Pipes session once live, and the `stream_health` sensor observes it from then on. Without a Pipes context in the
environment nothing here runs: the command line streams exactly as without Dagster.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff.control import lifecycle
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

# The message kinds and the extras the launcher passes: the protocol shared with orchestration/stream_launch.py.
TRANSITION, FIGURES, HANDED_OVER = "transition", "figures", "handed_over"
AFTER_SEQ, DETACHED = "after_seq", "detached"
FIGURES_EVERY_S = 15.0
LOG_EVERY_S = 5.0  # how often the log is read for entries other processes append (a rebase request)
PIPES_CONTEXT_ENV = "DAGSTER_PIPES_CONTEXT"


class Silent:
    """Not launched by Dagster: nothing to report."""

    def logged(self, handoff_id: str, status: str) -> None:
        pass

    def progress(self, topic: str, updates_topic: str, figures: dict) -> None:
        pass


@contextmanager
def reporting(tables: Tables, pipeline: Pipeline, bootstrap: str, out=logger.info):
    """A reporter for the stream's lifetime: `Silent` unless Dagster launched this process through Pipes."""
    if PIPES_CONTEXT_ENV not in os.environ:
        yield Silent()
        return
    from dagster_pipes import open_dagster_pipes

    reporter = None
    try:
        reporter = PipesReporter(open_dagster_pipes(), tables, pipeline, bootstrap, out)
    except Exception as err:  # noqa: BLE001 - a Pipes context that cannot be opened is no reason not to stream
        warnings_to(out)(f"Pipes: not reporting to Dagster ({type(err).__name__}: {str(err)[:200]})")
    if reporter is None:
        yield Silent()
        return
    try:
        yield reporter
    finally:
        reporter.close()


class PipesReporter:
    """Relays the handoff log and the monitor's figures from a thread of its own, so the monitor never waits on
    Kafka (the update latency sample) or on the messages; a report that cannot be written ends the reporting,
    never the stream."""

    def __init__(self, pipes, tables: Tables, pipeline: Pipeline, bootstrap: str, out):
        self.pipes, self.tables, self.pipeline, self.bootstrap, self.out = pipes, tables, pipeline, bootstrap, out
        extras = pipes.extras or {}
        self.detached = bool(extras.get(DETACHED))
        after = extras.get(AFTER_SEQ)
        self.after_seq = int(after) if after is not None else max([-1] + [e.seq for e in self._entries()])
        self.phases: dict[str, str] = {}  # handoff id -> the status the stream logged last
        self.transition_pending = False
        self.figures_due: tuple[str, str, dict, str] | None = None  # topic, updates topic, figures, phase
        self.next_figures_at = 0.0
        # one writer of messages at a time (the thread, close(), a log line); re-entrant: a line logged while the
        # thread writes goes out from inside that write
        self.lock = threading.RLock()
        self.due_lock = threading.Lock()  # held only to hand the figures from the monitor to the thread
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="dagster-pipes-reporter", daemon=True)
        self.thread.start()
        self.lines = _LinesToDagster(self)
        logging.getLogger("switchyard").addHandler(self.lines)
        out("reporting to Dagster through Pipes" + (" until live (detached)" if self.detached else ""))

    # ------------------------------------------------------------ called by the stream: no I/O, no waiting

    def logged(self, handoff_id: str, status: str) -> None:
        """The stream appended `status` to the handoff log: relay it now, and the figures with the next progress."""
        self.phases[handoff_id] = status
        self.transition_pending = True
        self.wake.set()

    def progress(self, topic: str, updates_topic: str, figures: dict) -> None:
        """The monitor's figures of this poll (what it writes to progress.json); sent when due."""
        now = time.monotonic()
        if self.transition_pending or now >= self.next_figures_at:
            self.transition_pending = False
            self.next_figures_at = now + FIGURES_EVERY_S
            phase = self.phases.get(figures["handoff_id"], Status.STREAM_STARTED)
            with self.due_lock:
                self.figures_due = (topic, updates_topic, figures, phase)
            self.wake.set()

    # ------------------------------------------------------------ the reporting thread

    def _run(self) -> None:
        while True:
            self.wake.wait(LOG_EVERY_S)
            self.wake.clear()
            with self.due_lock:
                due, self.figures_due = self.figures_due, None
            latency = self._latency(*due[:2]) if due and not self.stopping.is_set() else None
            with self.lock:
                if self.pipes is None:
                    return
                if due is not None:
                    _, _, figures, phase = due
                    self._send({"kind": FIGURES, "phase": phase, "progress": figures,
                                "update_latency": asdict(latency) if latency else None})
                self._relay()
            if self.stopping.is_set():
                return

    def _latency(self, topic: str, updates_topic: str):
        from switchyard.state_handoff.stream.update_latency import sample

        try:
            return sample(self.bootstrap, self.pipeline, topic, updates_topic, timeout_s=10.0)
        except Exception:  # noqa: BLE001 - a broker out of reach leaves it unknown; the lag figures say so
            return None

    def _entries(self) -> list:
        try:
            return list(PipelineView.read(self.tables).entries)
        except Exception as err:  # noqa: BLE001 - the log unreadable for a moment: the next round reads it
            warnings_to(self.out)(f"Pipes: could not read the handoff log ({type(err).__name__}); reading it again "
                                  "next round")
            return []

    def _relay(self) -> None:
        """Every entry logged since the last one relayed, in log order; detached, up to the stream being live."""
        if self.pipes is None:
            return
        entries = self._entries()
        switched = {e.handoff_id for e in entries if e.seq <= self.after_seq and e.status == Status.SWITCHED}
        for entry in (e for e in entries if e.seq > self.after_seq):
            self.after_seq = entry.seq
            self._send({"kind": TRANSITION, "entry": entry.as_payload()})
            live = lifecycle.goes_live(entry.status, entry.handoff_id in switched)
            if entry.status == Status.SWITCHED:
                switched.add(entry.handoff_id)
            if live and self.detached and self.pipes is not None:
                self._hand_over()
            if self.pipes is None:
                return

    def _send(self, message: dict) -> None:
        try:
            self.pipes.report_custom_message(message)
        except Exception as err:  # noqa: BLE001 - the run that launched us is gone: the stream goes on
            warnings_to(self.out)(f"Pipes: reporting to Dagster ended ({type(err).__name__}: {str(err)[:200]}); "
                                  "the stream_health sensor observes the stream")
            self.pipes = None

    def _hand_over(self) -> None:
        """Detached and live: the launching run returns now, and the sensor takes over."""
        self._send({"kind": HANDED_OVER})
        self._close_pipes()
        self.out("Pipes: live and detached; the stream_health sensor observes the stream from here")

    def _close_pipes(self) -> None:
        logging.getLogger("switchyard").removeHandler(self.lines)
        try:
            if self.pipes is not None:
                self.pipes.close()
        except Exception:  # noqa: BLE001 - the launching run is gone already
            pass
        self.pipes = None

    # ------------------------------------------------------------ the end of the stream

    def close(self) -> None:
        """A last round (the figures due, what the stream logged last: STOPPED, FAILED), then the session ends."""
        self.stopping.set()
        self.wake.set()
        self.thread.join(timeout=60)
        with self.lock:
            self._relay()
            self._close_pipes()


class _LinesToDagster(logging.Handler):
    """The stream's log lines (INFO and up) into the launching run's log, through the Pipes session while it is
    open; a line that cannot go out stays in the process's own log only."""

    def __init__(self, reporter: PipesReporter):
        super().__init__(logging.INFO)
        self.reporter = reporter

    def emit(self, record: logging.LogRecord) -> None:
        try:
            with self.reporter.lock:
                if self.reporter.pipes is not None:
                    self.reporter.pipes.log.log(record.levelno, record.getMessage())
        except Exception:  # noqa: BLE001 - reporting never fails the stream
            pass
