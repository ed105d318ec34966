"""The stream as the user runs it: `switchyard stream` in its own process, watched until a condition holds."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[1]


def start_stream(tables: Tables, bootstrap: str, log: Path) -> subprocess.Popen:
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"}
    return subprocess.Popen(
        [sys.executable, "-m", "jobs.cli", "stream", "--pipeline", tables.pipeline, "--warehouse", tables.warehouse,
         "--bootstrap", bootstrap, "--caught-up-lag", "0"],
        stdout=open(log, "a"), stderr=subprocess.STDOUT, cwd=ROOT, env=env, start_new_session=True)


def wait_until(condition, proc: subprocess.Popen, log: Path, what: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if proc.poll() is not None:
            pytest.fail(f"stream exited with {proc.returncode} while waiting for {what}:\n{log.read_text()[-3000:]}")
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what}:\n{log.read_text()[-3000:]}")
