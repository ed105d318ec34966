"""What the local servers (the Kafka broker and cluster, the Spark standalone cluster, the object store) share:
ports on 127.0.0.1 and whether a process is still alive."""

from __future__ import annotations

import socket
from pathlib import Path

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


def is_zombie(pid: int) -> bool:
    """Gone, or exited and not yet reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True
