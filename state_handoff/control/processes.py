"""Processes on this host as /proc shows them, the one place that reads it: who a process is (its boot and pid
namespace, its start time), whether it still runs, its command line and working folder, the tree below it, and the
scheduler's autogroups; and a clock that counts suspended time. The lease uses who a process is to free a lease whose
owner died on the same host; the local servers, the crash points and the commands that yield the cores use the rest."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

AUTOGROUP_ENABLED = "/proc/sys/kernel/sched_autogroup_enabled"


@dataclass(frozen=True)
class Stat:
    """What /proc/<pid>/stat says of a process: its state (`Z`: exited, not yet reaped), its parent's pid and when
    it started, in clock ticks since boot."""

    state: str
    parent: int
    started: int

    @property
    def zombie(self) -> bool:
        return self.state == "Z"


def stat(pid: int) -> Stat | None:
    """Process `pid`'s stat, None when it is gone or its stat unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            # the command name is in parentheses and may hold spaces and parentheses: the fields follow its last ")"
            fields = fh.read().rsplit(")", 1)[1].split()
        return Stat(state=fields[0], parent=int(fields[1]), started=int(fields[19]))
    except (OSError, IndexError, ValueError):
        return None


def pids() -> list[int]:
    """Every process's pid, as /proc lists them now (none where there is no /proc)."""
    try:
        return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []


def parents() -> dict[int, int]:
    """Every live process's parent pid, from one pass over /proc."""
    return {pid: found.parent for pid in pids() if (found := stat(pid)) is not None}


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: its children, theirs, and so on (from one pass over /proc)."""
    parent_of = parents()
    found, todo = [], [pid]
    while todo:
        parent = todo.pop()
        children = [child for child, of in parent_of.items() if of == parent]
        found += children
        todo += children
    return found


def command_line(pid: int) -> str:
    """Process `pid`'s arguments joined by spaces; "" when it is gone or they are unreadable."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def working_folder(pid: int) -> str | None:
    """The folder process `pid` runs in, None when it is gone or another user's."""
    try:
        return os.readlink(f"/proc/{pid}/cwd")
    except OSError:
        return None


def boot_id() -> str | None:
    """This host's current boot and this process's pid namespace (Linux): a pid names a process only within one
    boot of one host, and within one pid namespace (containers on one host share its boot, not their pids)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as fh:
            boot = fh.read().strip()
    except OSError:
        return None
    try:
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return boot


def started_at(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot: with the boot id and the pid, who it is."""
    found = stat(pid)
    return found.started if found else None


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs (a zombie, killed but not reaped yet, does not), and is the one that started at
    `started` when given: a recycled pid is another process. One that exists but whose stat cannot be read (another
    user's, where /proc hides them) counts as running."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    found = stat(pid)
    if found is None:
        return True
    if found.zombie:
        return False
    return started is None or found.started == started


def autogroups() -> bool:
    """Whether the scheduler shares the cores between sessions first (their autogroups)."""
    try:
        with open(AUTOGROUP_ENABLED) as fh:
            return fh.read().strip() == "1" and os.path.exists("/proc/self/autogroup")
    except OSError:
        return False


def autogroup_nice(pid: int | None = None) -> int | None:
    """The nice value of the autogroup of process `pid` (default: this one; `/autogroup-327 nice 10`), or None
    without autogroups."""
    try:
        with open(f"/proc/{pid or 'self'}/autogroup") as fh:
            return int(fh.read().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def set_autogroup_nice(nice: int) -> None:
    """Nice this process's autogroup (its session's, shared with every process in it) to `nice`; an OSError when
    the kernel refuses it."""
    with open("/proc/self/autogroup", "w") as fh:
        fh.write(str(nice))


def monotonic() -> float:
    """Seconds on this host's monotonic clock, counting time the machine spent suspended (a VM paused for a minute
    must find a minute gone)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def age() -> float | None:
    """Seconds since this process began (a JVM's start included when it started this one), from /proc; None where
    there is none."""
    found = stat(os.getpid())
    try:
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return round(uptime - found.started / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def since_start(at: float) -> float | None:
    """Seconds from this process's start to the time.monotonic() moment `at` (a moment ago)."""
    began = age()
    return None if began is None else round(began - (time.monotonic() - at), 3)
