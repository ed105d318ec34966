"""Processes as /proc shows them (state_handoff/control/processes.py), read of real child processes: who a process
is (parent, start time), whether it runs (a zombie does not, nor a pid that names another process now), its command
line and folder, the tree below it, and its session's autogroup."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from switchyard.state_handoff.control import processes

ROOT = Path(__file__).resolve().parents[2]

# a child that starts a grandchild, prints its pid and waits
PARENT_OF_ONE = ("import subprocess, sys, time\n"
                 "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                 "print(child.pid, flush=True)\n"
                 "time.sleep(60)\n")


def _sleeper(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)", *args], **popen)


def _until(condition, what: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_child_is_seen_running_then_exited_then_gone():
    child = _sleeper()
    try:
        seen = processes.stat(child.pid)
        assert seen is not None and seen.parent == os.getpid() and not seen.zombie, seen
        assert processes.started_at(child.pid) == seen.started >= processes.started_at(os.getpid())
        assert child.pid in processes.pids() and os.getpid() in processes.pids()
        assert processes.process_alive(child.pid) and processes.process_alive(child.pid, seen.started)
        assert not processes.process_alive(child.pid, seen.started + 1), "a recycled pid is another process"
    finally:
        child.kill()
    _until(lambda: processes.stat(child.pid).zombie, "the killed child never showed as exited")
    assert not processes.process_alive(child.pid), "killed but not yet reaped: exited all the same"
    child.wait()
    assert processes.stat(child.pid) is None and processes.started_at(child.pid) is None
    assert not processes.process_alive(child.pid) and child.pid not in processes.pids()
    assert processes.command_line(child.pid) == "" and processes.working_folder(child.pid) is None


def test_a_command_line_with_spaces_and_its_folder(tmp_path):
    folder = tmp_path / "a folder (with parens)"
    folder.mkdir()
    child = _sleeper("--marker", "two words", cwd=folder)
    try:
        _until(lambda: "--marker" in processes.command_line(child.pid), "the child's arguments never showed")
        assert processes.command_line(child.pid).endswith(" -c import sys, time; time.sleep(60) --marker two words")
        assert processes.working_folder(child.pid) == str(folder.resolve())
    finally:
        child.kill()
        child.wait()


def test_the_tree_below_a_process_is_its_children_and_theirs():
    child = subprocess.Popen([sys.executable, "-c", PARENT_OF_ONE], stdout=subprocess.PIPE, text=True)
    try:
        grandchild = int(child.stdout.readline())
        assert processes.descendants(child.pid) == [grandchild]
        assert {child.pid, grandchild} <= set(processes.descendants(os.getpid()))
        assert processes.parents()[grandchild] == child.pid and processes.parents()[child.pid] == os.getpid()
        assert processes.descendants(grandchild) == []
    finally:
        for pid in processes.descendants(child.pid):
            os.kill(pid, 9)
        child.kill()
        child.wait()


def test_who_this_process_is():
    assert processes.boot_id() == processes.boot_id() and processes.boot_id().count("/") == 1
    assert processes.boot_id().endswith(os.readlink("/proc/self/ns/pid"))
    age = processes.age()
    assert age is not None and 0 <= age < 24 * 3600
    assert processes.since_start(time.monotonic()) == pytest.approx(age, abs=1)


@pytest.mark.skipif(not processes.autogroups(), reason="the scheduler has no autogroups here")
def test_a_session_leader_nices_its_autogroup_and_its_children_share_it():
    ours = processes.autogroup_nice()
    nice = 7 if ours != 7 else 8
    code = ("import subprocess, sys, time\n"
            "from switchyard.state_handoff.control.processes import set_autogroup_nice\n"
            f"set_autogroup_nice({nice})\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(child.pid, flush=True)\n"
            "time.sleep(60)\n")
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                              start_new_session=True)
    try:
        child = int(leader.stdout.readline())
        assert processes.autogroup_nice(leader.pid) == processes.autogroup_nice(child) == nice
        assert processes.autogroup_nice() == ours, "another session's autogroup is its own"
    finally:
        os.killpg(leader.pid, 9)
        leader.wait()
