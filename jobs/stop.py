"""Stopping a live stream from outside its process: SIGTERM to the lease's owner, then wait for its STOPPED."""

from __future__ import annotations

import os
import signal
import socket
import time

from state_handoff import handoff_log, lease
from state_handoff.errors import UserError
from state_handoff.lifecycle import Status
from state_handoff.tables import Tables


def stop_stream(tables: Tables, timeout_s: float = 300.0, out=print):
    """Ask the pipeline's running stream to stop cleanly (it drains and logs STOPPED) and wait for it; returns the
    STOPPED entry, or None when the process ended without one (it failed: see the handoff log)."""
    owner = lease.owner(tables)
    if owner is None or owner.command != lease.STREAM:
        raise UserError(f"pipeline {tables.pipeline} has no running stream"
                        + (f" (it is owned by `{owner.command}`)" if owner else "") + ": nothing to stop")
    if owner.owner_host != socket.gethostname():
        raise UserError(f"the stream of pipeline {tables.pipeline} runs on host {owner.owner_host} (pid "
                        f"{owner.owner_pid}): stop it there (SIGTERM)")
    seen = len(handoff_log.entries(None, tables))
    os.kill(owner.owner_pid, signal.SIGTERM)
    out(f"stop {tables.pipeline}: SIGTERM sent to the stream (pid {owner.owner_pid}); waiting for it to drain")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        gone = lease.owner(tables) is None  # before the log: STOPPED is written before the lease is let go
        since = handoff_log.entries(None, tables)[seen:]
        stopped = [e for e in since if e.status == Status.STOPPED]
        if stopped:
            return stopped[-1]
        if gone:  # gone without STOPPED: it failed on the way out
            failed = [e for e in since if e.status == Status.FAILED]
            if failed:
                out(f"stop {tables.pipeline}: the stream failed on the way out: "
                    f"{handoff_log.details(failed[-1]).get('reason')}")
            return None
        time.sleep(1.0)
    raise UserError(f"the stream of pipeline {tables.pipeline} (pid {owner.owner_pid}) did not stop within "
                    f"{timeout_s:.0f}s: see `switchyard status`, or kill it")
