"""A command that yields the cores to a live stream: `switchyard redeploy` and `rollback` run their pass beside the
stream they replace at a lower priority, in a way the scheduler honours against a stream in another session.

On Linux with autogroups (`kernel.sched_autogroup_enabled = 1`, the default of most distributions), the scheduler
shares the cores between sessions first, each session's autogroup weighed by its own nice value, and by each
process's niceness only within a session. A stream runs in a session of its own (`switchyard serve`, Dagster's
launch, a service manager, `setsid`), so a niced redeploy in a shell's session still took half the cores from it.
The work therefore runs in a session of its own whose autogroup is niced: a child of this process, which waits for
it, passes it the signals a terminal or a supervisor sends, and exits as it exited (of the same signal, when killed).
The child dies with this process (`PR_SET_PDEATHSIG`), so killing the command kills its work, as it did in one process.
Without autogroups (or on a system without `/proc`), the niceness alone is what the scheduler weighs, and the command
runs here."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import subprocess
import sys

from switchyard.state_handoff.control.processes import autogroup_nice, autogroups, set_autogroup_nice

logger = logging.getLogger(__name__)

CHILD_OF = "SWITCHYARD_YIELDING_CHILD_OF"  # set in the child's environment: the pid of the process that waits for it
PASSED_ON = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
PR_SET_PDEATHSIG = 1


def yield_cores(nice: int, argv: list[str]) -> int | None:
    """Run the command at niceness `nice`. None: this process now runs at it (go on with the command here); an
    int: the command, `argv` run again in a child in a session of its own, ran there at it and exited with this."""
    if nice <= 0:
        return None
    if not autogroups() or os.getsid(0) == os.getpid():
        _lower_here(nice)
        return None
    return _run_in_own_session(nice, argv)


def _lower_here(nice: int) -> None:
    """This process at `nice` (its JVM, started after, inherits it), and its session's autogroup when it leads one:
    the autogroup is then its own and its children's alone."""
    if os.environ.get(CHILD_OF):
        _die_with_parent(int(os.environ.pop(CHILD_OF)))
    if os.nice(0) < nice:  # raising it back would need privilege: a process already lower stays where it is
        os.nice(nice - os.nice(0))
    if os.getsid(0) == os.getpid() and autogroups():
        try:
            set_autogroup_nice(nice)
        except OSError as err:  # a kernel that refuses it: the niceness alone, as without autogroups
            logger.debug(f"the session's autogroup not niced ({err}); the niceness alone")
    logger.debug(f"running at niceness {os.nice(0)}, autogroup nice {autogroup_nice()}")


def _die_with_parent(parent: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):  # no prctl: the child outlives a killed parent, as a JVM outlives its Python
        return
    if os.getppid() != parent:  # the parent died before the request took: nothing waits for this work
        os._exit(128 + signal.SIGKILL)


def _run_in_own_session(nice: int, argv: list[str]) -> int:
    child = subprocess.Popen(argv, start_new_session=True, env={**os.environ, CHILD_OF: str(os.getpid())})
    logger.debug(f"running in a session of its own at niceness {nice}: pid {child.pid}")

    def pass_on(signum, _frame) -> None:
        try:
            child.send_signal(signum)
        except ProcessLookupError:
            pass

    before = {sig: signal.signal(sig, pass_on) for sig in PASSED_ON}
    try:
        code = child.wait()
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if code < 0:  # killed: this process dies of the same signal, so its caller sees what the work saw
        sys.stdout.flush()
        sys.stderr.flush()
        if -code not in (signal.SIGKILL, signal.SIGSTOP):  # the two no handler can be set for
            signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code
