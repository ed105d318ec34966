"""The stream as its own process (`switchyard stream`) in a Dagster Pipes session: what it reports (its transitions,
lag, rates, update latency; jobs/stream/pipes.py) becomes observations of `stream`, and its death fails the run."""

import os
import re
import signal
import subprocess
import time
import warnings
from collections import deque
from collections.abc import Generator, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from switchyard.jobs.stream.command import stream_command
from switchyard.jobs.stream.pipes import AFTER_SEQ, DETACHED, FIGURES, HANDED_OVER, TRANSITION
from switchyard.orchestration.stream_health import is_observed, reported_progress, transition_metadata
from switchyard.state_handoff import settings
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.stream.layout import stream_dir
from switchyard.state_handoff.tables import Tables


class StreamConfig(dg.Config):
    until_caught_up: bool = Field(True, description="End the run (and the stream) once CAUGHT_UP.")
    for_seconds: float | None = Field(None, description="With until_caught_up off: stream this long. Neither: "
                                                        "leave the stream running once SWITCHED.")
    caught_up_lag: int = Field(0, description="Offsets behind latest at or under which the stream is caught up.")
    falling_behind_lag: int | None = Field(None, description="Offsets behind past which it is falling behind.")
    max_offsets_per_trigger: int = 200_000

    @property
    def detached(self) -> bool:
        return not self.until_caught_up and self.for_seconds is None


def command(config: StreamConfig, tables: Tables, bootstrap: str, pipeline: str | None = None) -> list[str]:
    """The stream process's command line; `pipeline`: what it finds the pipeline by (default: its name)."""
    flags = ["--caught-up-lag", str(config.caught_up_lag),
             "--max-offsets-per-trigger", str(config.max_offsets_per_trigger)]
    if config.until_caught_up:
        flags.append("--until-caught-up")
    elif config.for_seconds is not None:
        flags += ["--for", str(config.for_seconds)]
    if config.falling_behind_lag is not None:
        flags += ["--falling-behind-lag", str(config.falling_behind_lag)]
    return stream_command(pipeline or tables.pipeline, tables.warehouse, bootstrap, extra_args=flags)


def process_log(tables: Tables, handoff_id: str) -> Path:
    """Where the stream process's output goes: beside its checkpoints in a local warehouse; under the local
    runtime folder when the warehouse is on an object store, which cannot append to a file."""
    folder = stream_dir(tables, handoff_id)
    if storage.is_object_store(folder):
        from switchyard.deploy.paths import runtime_home

        return runtime_home() / "stream-logs" / tables.pipeline / handoff_id / "process.log"
    return Path(folder) / "process.log"


_JVM_FRAME = re.compile(r"^\s+(at |\.\.\. \d+ more)")


def _tail(log: Path, lines: int = 30) -> str:
    """The log's last `lines` lines without the JVM's stack frames: a killed driver's JVM logs a trace per task it
    loses, whose frames would crowd out what the stream said last."""
    try:
        with open(log, errors="replace") as fh:
            return "".join(deque((line for line in fh if not _JVM_FRAME.match(line)), maxlen=lines))
    except FileNotFoundError:
        return ""


class _Reports:
    """What the stream reported through Pipes so far, each message an observation of `stream` as it arrives: a
    transition with `transition_metadata`, its figures under the sensor's stable keys."""

    def __init__(self, context: dg.AssetExecutionContext, tables: Tables, switch: Handoff, asset_key: dg.AssetKey):
        self.context, self.tables, self.switch, self.asset_key = context, tables, switch, asset_key
        self.transitions: list = []
        self.kinds: set[str] = set()
        self.relayed = 0

    def relay(self, session: dg.PipesSession) -> list[dg.AssetObservation]:
        messages = session.get_custom_messages()
        observations = []
        for message in messages[self.relayed:]:
            self.kinds.add(message.get("kind"))
            metadata = self._metadata(message)
            if metadata is not None:
                observations.append(dg.AssetObservation(asset_key=self.asset_key, metadata=metadata))
        self.relayed = len(messages)
        return observations

    def _metadata(self, message: dict) -> dict | None:
        if message.get("kind") == TRANSITION:
            entry = LogEntry.from_payload(message["entry"])
            if not is_observed(entry):
                return None
            self.transitions.append(entry)
            self.context.log.info(f"stream {entry.status} at {entry.at}")
            start = self.switch.start_offsets if entry.handoff_id == self.switch.handoff_id else None
            return transition_metadata(entry, self.tables, start)
        if message.get("kind") == FIGURES:
            progress = reported_progress(message["phase"], message["progress"], message.get("update_latency"))
            return progress.metadata(progress.updated or time.time())
        return None


@contextmanager
def _pipes_session(context: dg.AssetExecutionContext, extras: dict) -> Iterator[dg.PipesSession]:
    """A Pipes session whose context travels in the environment and whose messages in a temporary file."""
    with ExitStack() as stack:
        with warnings.catch_warnings():
            # Dagster 1.13 opening a session reads a preview property of every message reader and the deprecated
            # `context.run_id` itself: warnings about Dagster's own code, not about an API this project calls
            warnings.filterwarnings("ignore", message=r".*expected_writer_count", category=dg.PreviewWarning)
            warnings.filterwarnings("ignore", message=r".*run_id is deprecated", category=DeprecationWarning)
            session = stack.enter_context(dg.open_pipes_session(
                context=context, context_injector=dg.PipesEnvContextInjector(),
                message_reader=dg.PipesTempFileMessageReader(), extras=extras))
        yield session


def _exit_reason(code: int) -> str:
    return f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"


def launch_and_watch(context: dg.AssetExecutionContext, config: StreamConfig, tables: Tables, bootstrap: str,
                     switch: Handoff, env: dict[str, str], asset_key: dg.AssetKey, pipeline: str | None = None,
                     poll_seconds: float = 1.0) -> Generator[dg.AssetObservation, None, list]:
    """Start the stream process in a Pipes session and yield what it reports (each entry of the handoff log from
    now on, its figures) as observations of the stream asset `asset_key`, as they arrive.

    Returns the transitions seen. Waits for the process to end; when detached, only until it is live (it hands
    over then, and the `stream_health` sensor observes it from there). A process that dies fails the run with the
    last lines of its output; a run that is stopped stops the stream cleanly with it (SIGTERM), unless the
    stream was meant to outlive the run.
    """
    log = process_log(tables, switch.handoff_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    after_seq = PipelineView.read(tables).last_seq
    reports = _Reports(context, tables, switch, asset_key)
    handed_over = False
    with _pipes_session(context, {AFTER_SEQ: after_seq, DETACHED: config.detached}) as session:
        with open(log, "a") as out:
            process = subprocess.Popen(command(config, tables, bootstrap, pipeline), stdout=out,
                                       stderr=subprocess.STDOUT,
                                       env={**os.environ, **settings.overrides(), **env,
                                            **session.get_bootstrap_env_vars()},
                                       start_new_session=True)
        context.log.info(f"stream process {process.pid} started; its output goes to {log}")
        try:
            while True:
                exited = process.poll() is not None
                yield from reports.relay(session)
                handed_over = config.detached and not exited and HANDED_OVER in reports.kinds
                if exited or handed_over:
                    break
                time.sleep(poll_seconds)
            deadline = time.monotonic() + 10
            while handed_over and not session.message_handler.received_closed_message and time.monotonic() < deadline:
                time.sleep(0.2)  # its `closed` follows at once: the session then ends without a warning
        finally:
            if process.poll() is None and not handed_over:
                process.send_signal(signal.SIGTERM)
                try:
                    process.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    yield from reports.relay(session)  # what the session read as it closed
    if handed_over:
        context.log.info(f"stream process {process.pid} is live and outlives this run; the stream_health sensor "
                         "observes it from here")
    elif process.returncode != 0:
        phase = str(reports.transitions[-1].status) if reports.transitions else "none reported"
        tail = _tail(log)
        last_line = tail.rstrip("\n").rpartition("\n")[2].strip()
        raise dg.Failure(description=f"the stream process {_exit_reason(process.returncode)} (last phase {phase}): "
                                     f"{last_line or 'no output'}",
                         metadata={"exit_code": process.returncode, "last_phase": phase,
                                   "log": dg.MetadataValue.path(str(log)),
                                   "output": dg.MetadataValue.md(f"```\n{tail}\n```")})
    return reports.transitions
