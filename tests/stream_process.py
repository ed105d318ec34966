"""The stream as the user runs it: `switchyard stream` in its own process, watched until a condition holds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state_handoff import stream_progress
from state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[1]


def start_stream(tables: Tables, bootstrap: str, log: Path, *flags: str, env: dict | None = None) -> subprocess.Popen:
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", **(env or {})}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "stream", "--pipeline", tables.pipeline, "--warehouse", tables.warehouse,
         "--bootstrap", bootstrap, "--caught-up-lag", "0", *flags],
        stdout=open(log, "a"), stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)


class LaunchedStream:
    """A stream process Dagster launched from this test process (a detached run returns without a handle to it):
    watched and reaped through its pid, as a `subprocess.Popen` would be."""

    def __init__(self, pid: int):
        self.pid, self.returncode = pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == self.pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"stream process {self.pid}", timeout)
            time.sleep(0.5)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        os.kill(self.pid, sig)


def wait_until(condition, proc: subprocess.Popen | LaunchedStream, log: Path, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"stream exited with {proc.returncode} while waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")


def event_batches(tables: Tables, handoff_id: str) -> list[dict[int, dict]]:
    """The stream's committed events batches in order, per partition what each read (from `stream_batches`)."""
    batches = stream_progress.batches(tables, handoff_id)
    assert [b.batch_id for b in batches] == list(range(len(batches))), "a batch is missing or repeated"
    assert len({b.incarnation for b in batches}) <= 1, "batches from two checkpoints"
    return [{int(p): v for p, v in b.partitions.items()} for b in batches]
