"""Who a process is, on this host: its boot and pid namespace, its start time, whether it still runs, and a clock
that counts suspended time. The lease uses them to free a lease whose owner died on the same host."""

from __future__ import annotations

import os
import time


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


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (the state first), None when unreadable."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def started_at(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot: with the boot id and the pid, who it is."""
    fields = _stat(pid)
    return int(fields[19]) if fields and len(fields) > 19 else None


def process_alive(pid: int, started: int | None = None) -> bool:
    """Whether process `pid` runs (a zombie, killed but not reaped yet, does not), and is the one that started at
    `started` when given: a recycled pid is another process."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    fields = _stat(pid)
    if fields is None:
        return True
    if fields[0] == "Z":
        return False
    return started is None or len(fields) <= 19 or int(fields[19]) == started


def monotonic() -> float:
    """Seconds on this host's monotonic clock, counting time the machine spent suspended (a VM paused for a minute
    must find a minute gone)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME) if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic()


def age() -> float | None:
    """Seconds since this process began (a JVM's start included when it started this one), from /proc; None where
    there is none."""
    fields = _stat(os.getpid())
    try:
        uptime = float(open("/proc/uptime").read().split()[0])
        return round(uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"), 3)
    except (OSError, ValueError, IndexError, TypeError):
        return None


def since_start(at: float) -> float | None:
    """Seconds from this process's start to the time.monotonic() moment `at` (a moment ago)."""
    began = age()
    return None if began is None else round(began - (time.monotonic() - at), 3)
