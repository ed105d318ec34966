"""Free ports on 127.0.0.1 for the servers the tests start."""

from __future__ import annotations

import socket

from switchyard.deploy.local_server import port_free


def free_port_pair() -> int:
    """A port P with P+1 free as well (a broker and its controller)."""
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 65000 and port_free(port) and port_free(port + 1):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")
