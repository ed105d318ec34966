"""The stream as its own process (`switchyard stream`), its transitions relayed to Dagster as asset observations."""

import os
import signal
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

import dagster as dg
from pydantic import Field

from orchestration.stream_health import is_observed, transition_metadata
from state_handoff import handoff_log, storage
from state_handoff.handoff import Handoff
from state_handoff.stream_control import stream_dir
from state_handoff.tables import Tables


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


def command(config: StreamConfig, tables: Tables, bootstrap: str) -> list[str]:
    cmd = [sys.executable, "-m", "jobs.cli", "stream", "--pipeline", tables.pipeline,
           "--warehouse", os.path.abspath(tables.warehouse) if "://" not in tables.warehouse else tables.warehouse,
           "--bootstrap", bootstrap, "--caught-up-lag", str(config.caught_up_lag),
           "--max-offsets-per-trigger", str(config.max_offsets_per_trigger)]
    if config.until_caught_up:
        cmd.append("--until-caught-up")
    elif config.for_seconds is not None:
        cmd += ["--for", str(config.for_seconds)]
    if config.falling_behind_lag is not None:
        cmd += ["--falling-behind-lag", str(config.falling_behind_lag)]
    return cmd


def _transitions(tables: Tables, after_seq: int) -> list:
    """The stream's transitions and the steps of its rebases logged after `after_seq`."""
    return [e for e in handoff_log.entries(None, tables) if e.seq > after_seq and is_observed(e)]


def process_log(tables: Tables, handoff_id: str) -> Path:
    """Where the stream process's output goes: beside its checkpoints in a local warehouse; under the local
    runtime folder when the warehouse is on an object store, which cannot append to a file."""
    folder = stream_dir(tables, handoff_id)
    if storage.is_object_store(folder):
        from deploy.paths import runtime_home

        return runtime_home() / "stream-logs" / tables.pipeline / handoff_id / "process.log"
    return Path(folder) / "process.log"


def _tail(log: Path, lines: int = 20) -> str:
    try:
        with open(log, errors="replace") as fh:
            return "".join(deque(fh, maxlen=lines))
    except FileNotFoundError:
        return ""


def launch_and_watch(context: dg.AssetExecutionContext, config: StreamConfig, tables: Tables, bootstrap: str,
                     switch: Handoff, env: dict[str, str], poll_seconds: float = 1.0) -> list:
    """Start the stream process and relay each new transition of the handoff as an observation of `stream`.

    Returns the transitions seen. Waits for the process to end, or only until SWITCHED when detached; a run
    that is stopped stops the stream cleanly with it (SIGTERM), unless the stream was meant to outlive the run.
    """
    handoff_id = switch.handoff_id
    log = process_log(tables, handoff_id)
    log.parent.mkdir(parents=True, exist_ok=True)
    after_seq = max([-1] + [e.seq for e in handoff_log.entries(None, tables)])
    with open(log, "a") as out:
        process = subprocess.Popen(command(config, tables, bootstrap), stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, **env}, start_new_session=True)
    context.log.info(f"stream process {process.pid} started; its output goes to {log}")
    seen: list = []
    try:
        while True:
            exited = process.poll() is not None
            for entry in _transitions(tables, after_seq):
                after_seq = entry.seq
                seen.append(entry)
                context.log.info(f"stream {entry.status} at {entry.at}")
                start = switch.start_offsets if entry.handoff_id == switch.handoff_id else None
                context.log_event(dg.AssetObservation(asset_key="stream",
                                                      metadata=transition_metadata(entry, tables, start)))
            if exited:
                break
            if config.detached and any(e.status == handoff_log.SWITCHED for e in seen):
                return seen
            time.sleep(poll_seconds)
    finally:
        if process.poll() is None and not (config.detached and any(e.status == handoff_log.SWITCHED for e in seen)):
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
    if process.returncode != 0:
        raise dg.Failure(description=f"the stream process exited with code {process.returncode}: "
                                     f"{_tail(log, 1).strip() or 'no output'}",
                         metadata={"log": dg.MetadataValue.path(str(log)),
                                   "output": dg.MetadataValue.md(f"```\n{_tail(log)}\n```")})
    return seen
