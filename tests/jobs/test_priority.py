"""`switchyard redeploy` and `rollback` yield the cores to the live stream (jobs/cli/priority.py): their work runs
at the niceness asked for, and where the scheduler shares the cores between sessions first (autogroups), in a
session of its own whose autogroup carries that niceness, since a stream runs in a session of its own. The process
that waits for the work exits as the work did, passes on the signals it is sent, and takes the work with it when
killed. No JVM: tests/support/yielding_child.py stands for the command; test_redeploy.py checks a redeploy's JVM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from switchyard.jobs.cli.priority import autogroups
from tests.support.streams import ROOT

CHILD = str(ROOT / "tests" / "support" / "yielding_child.py")


def _start(mode: str) -> subprocess.Popen:
    # in this test's session, as a command run from a shell or a supervisor is in its caller's
    return subprocess.Popen([sys.executable, CHILD, mode], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})


def _where(proc: subprocess.Popen) -> dict:
    return json.loads(proc.stdout.readline())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_work_runs_niced_in_a_session_of_its_own_and_its_exit_is_the_commands():
    proc = _start("exit")
    where = _where(proc)
    assert proc.wait(timeout=60) == 3
    assert where["nice"] == 10, where
    if autogroups():
        assert where["pid"] != proc.pid and where["sid"] == where["pid"], where  # a child leading its own session
        assert where["autogroup"] == 10, where  # its session weighed at niceness 10 against the stream's
    else:
        assert where["pid"] == proc.pid, where  # the niceness alone is weighed: it runs here


@pytest.mark.skipif(not autogroups(), reason="without autogroups the work runs in the command's own process")
def test_a_killed_work_kills_the_command_and_a_signal_reaches_the_work():
    killed = _start("kill")
    _where(killed)
    assert killed.wait(timeout=60) == -signal.SIGKILL  # as a crash point's SIGKILL is seen by its caller

    stopped = _start("wait")
    work = _where(stopped)["pid"]
    stopped.send_signal(signal.SIGTERM)
    assert stopped.wait(timeout=60) == -signal.SIGTERM
    assert not _alive(work)

    orphaned = _start("wait")
    work = _where(orphaned)["pid"]
    orphaned.kill()
    orphaned.wait(timeout=60)
    deadline = time.monotonic() + 30
    while _alive(work) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(work), "the work outlived the command it ran for"
