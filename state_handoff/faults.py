"""Named crash points: `SWITCHYARD_FAULT=<point>[:<n>]` kills the process the n-th time it reaches `point`.

The kill is what a SIGKILL of the process group does: the JVM and every other child first, then this
process, with no cleanup, no log entry and no flush. `SWITCHYARD_FAULT=<point>[:<n>]:fail` raises InjectedFailure
there instead: a failure the process sees and reports, as a query's or the cluster's would be. Unset, `reach` is one
comparison.
"""

from __future__ import annotations

import os
import signal

from switchyard.state_handoff import settings
from switchyard.state_handoff.control.processes import descendants
from switchyard.state_handoff.crash_points import POINTS  # noqa: F401 (the names, for callers of faults)
from switchyard.state_handoff.errors import UserError

ENV = "SWITCHYARD_FAULT"


class InjectedFailure(RuntimeError):
    """What a crash point armed with `:fail` raises."""


def _armed_from_env() -> tuple[str, int, bool] | None:
    """(point, n, fail) or None; the setting's kind (state_handoff/settings.py) parses it."""
    try:
        return settings.value(ENV)
    except UserError:  # a misspelt point never fires: the command line refuses it before any work
        return None


_armed = _armed_from_env()
_reached = 0


def armed(point: str) -> bool:
    """Whether `point` is the armed crash point (for hooks that exist only to reach it)."""
    return _armed is not None and _armed[0] == point


def reach(point: str) -> None:
    """Die here if this is the armed point's n-th arrival."""
    global _reached
    if _armed is None or _armed[0] != point:
        return
    _reached += 1
    if _reached >= _armed[1]:
        if _armed[2]:
            raise InjectedFailure(f"injected failure at {point} ({ENV})")
        kill_process_tree()


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def kill_process_tree() -> None:
    """SIGKILL every descendant (the Spark JVM, PySpark's daemon and its workers), then this process.

    The tree is frozen first: each pass stops what it finds with SIGSTOP and looks again, until a pass finds nothing
    new, so a worker forked while the tree was being read is found too (a stopped process cannot fork, and one killed
    while its child was being created would leave that child orphaned and alive, outside the tree).
    """
    me, stopped = os.getpid(), []
    while new := [pid for pid in descendants(me) if pid not in stopped]:
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped += new
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    os.kill(me, signal.SIGKILL)
