"""What every local server here shares (the Kafka broker and each node of its cluster, the Spark standalone master
and workers, the object store): a process started in the background on 127.0.0.1, its ports, its pid file, the
wait until it answers, and the stop (SIGTERM, then SIGKILL). Each server's own module keeps its command line, its
configuration and its readiness probe."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from switchyard.state_handoff.control import processes
from switchyard.state_handoff.errors import UserError

HOST = "127.0.0.1"


def port_free(port: int) -> bool:
    """Nothing listens on `port` (a connection lingering in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def port_accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


# Ports a server started here listens on: below Linux's ephemeral range (32768 and up), which the system hands to
# outgoing connections. A port taken from that range can be taken by a client's connection in the seconds a JVM
# server needs to bind it; a node stopped and started again must find its ports free.
LISTEN_PORTS = range(20000, 32700)


def free_ports(count: int = 1) -> int:
    """The first of `count` consecutive ports nothing listens on, chosen at random in LISTEN_PORTS."""
    chooser = random.SystemRandom()
    for _ in range(200):
        base = chooser.randrange(LISTEN_PORTS.start, LISTEN_PORTS.stop - count)
        if all(port_free(base + i) for i in range(count)):
            return base
    raise UserError(f"no {count} consecutive free ports on {HOST} between {LISTEN_PORTS.start} and "
                    f"{LISTEN_PORTS.stop}: stop servers left running")


def free_port() -> int:
    """One port nothing listens on (free_ports)."""
    return free_ports(1)


def check_ports_free(ports: Iterable[int], option: str = "--port") -> None:
    """A one-line UserError naming the first of `ports` something already listens on, and the option to change."""
    for port in ports:
        if not port_free(port):
            raise UserError(f"port {port} on {HOST} is already in use: stop what holds it or pick another {option}")


def started_pid(pid: object, *markers: str) -> int | None:
    """`pid`, if that process still runs and is the one we started: its command line holds every one of `markers`
    (the system may have given a gone server's pid to another process)."""
    if not isinstance(pid, int) or not processes.process_alive(pid):
        return None
    cmdline = processes.command_line(pid)
    return pid if all(m in cmdline for m in markers) else None


def launch(command: list[str], log: Path, cwd: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `command` in the background, in a session of its own (a Ctrl-C at the terminal does not reach it),
    its output appended to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, cwd=cwd, env=env)


def wait_until_ready(ready: Callable[[], bool], timeout_s: float, starting: Iterable[tuple[subprocess.Popen, str]] = (),
                     interval_s: float = 0.5) -> bool:
    """Poll `ready` until it holds (True) or `timeout_s` passes (False). When one of the `starting` processes exits
    first: a UserError with its message, where `{code}` stands for the exit code."""
    starting = list(starting)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if ready():
            return True
        for process, exited in starting:
            if process.poll() is not None:
                raise UserError(exited.replace("{code}", str(process.returncode)))
        time.sleep(interval_s)
    return False


def send_stop(pid: int) -> bool:
    """SIGTERM to `pid`; False when it is gone already."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    return True


def wait_stopped(pid: int, deadline: float) -> None:
    """Wait for `pid` to exit until `deadline` (monotonic), then SIGKILL it; returns once it is gone (or a zombie
    its parent has yet to reap)."""
    while time.monotonic() < deadline and processes.process_alive(pid):
        time.sleep(0.2)
    if processes.process_alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        while processes.process_alive(pid):
            time.sleep(0.1)


def terminate(pid: int, timeout_s: float) -> None:
    """SIGTERM, then SIGKILL after `timeout_s`; returns once the process is gone."""
    if send_stop(pid):
        wait_stopped(pid, time.monotonic() + timeout_s)


@dataclass(frozen=True)
class PidFile:
    """The file that holds the pid of a server this project started, and what that server's command line holds
    (so a pid the system reused for another process is not taken for it)."""

    path: Path
    markers: tuple[str, ...]

    def running(self) -> int | None:
        """The recorded pid, if that process still runs and is ours."""
        try:
            pid = int(self.path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        return started_pid(pid, *self.markers)

    def record(self, pid: int) -> None:
        self.path.write_text(str(pid))

    def forget(self) -> None:
        self.path.unlink(missing_ok=True)

    def send_stop(self) -> int | None:
        """SIGTERM to the server; its pid, or None (and the file forgotten) when it was not running."""
        pid = self.running()
        if pid is None or not send_stop(pid):
            self.forget()
            return None
        return pid

    def wait_stopped(self, pid: int, deadline: float) -> None:
        """Wait for the server to exit until `deadline` (monotonic), kill it after, and forget the file."""
        wait_stopped(pid, deadline)
        self.forget()

    def stop(self, timeout_s: float) -> int | None:
        """Stop the server (SIGTERM, then SIGKILL after `timeout_s`) and wait for it; its pid, None when it was
        not running."""
        pid = self.send_stop()
        if pid is not None:
            self.wait_stopped(pid, time.monotonic() + timeout_s)
        return pid

    def wait_until_ready(self, ready: Callable[[], bool], timeout_s: float, process: subprocess.Popen | None,
                         exited: str, interval_s: float = 0.5) -> bool:
        """`wait_until_ready` for the server this file records, started as `process` (None: it ran already); the
        file is forgotten when the process exits while starting."""
        try:
            return wait_until_ready(ready, timeout_s, [(process, exited)] if process is not None else [], interval_s)
        except UserError:
            self.forget()
            raise
