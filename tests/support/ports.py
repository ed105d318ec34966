"""Free ports on 127.0.0.1 for the servers the tests start (below the ephemeral range: deploy/local_server.py)."""

from __future__ import annotations

from switchyard.deploy.local_server import free_ports


def free_port_pair() -> int:
    """A port P with P+1 free as well (a broker and its controller)."""
    return free_ports(2)
