"""A dev broker with a SASL/SCRAM listener keeps its password off every command line: while its storage is formatted
with the SCRAM credential and while it runs, no process's command line (what `ps` shows anyone on the host) holds
it."""

from __future__ import annotations

import threading
from pathlib import Path

from switchyard.deploy import kafka_broker
from switchyard.deploy.local_server import free_ports
from switchyard.state_handoff.control.processes import command_line, pids
from tests.support.kafka_cluster import SASL_ENV

PASSWORD = SASL_ENV["SWITCHYARD_KAFKA_SASL_PASSWORD"]


class CommandLines(threading.Thread):
    """Reads every process's command line every few milliseconds until stopped: those that mention `marker`, and
    any that holds `secret`."""

    def __init__(self, marker: str, secret: str) -> None:
        super().__init__(daemon=True)
        self.marker, self.secret = marker, secret
        self.mentioning: set[str] = set()
        self.holding: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.01):
            for pid in pids():
                line = command_line(pid)
                if self.marker in line:
                    self.mentioning.add(line)
                if self.secret in line:
                    self.holding.add(line)


def test_the_scram_password_is_on_no_command_line(tmp_path, sasl_env):
    broker = kafka_broker.Broker.at(free_ports(2), tmp_path / "kafka")
    seen = CommandLines(str(broker.home), PASSWORD)
    seen.start()
    try:
        assert "SASL" in kafka_broker.start(broker, sasl=True)  # formatted with the credential; clients get in
        seen.done.set()
        seen.join()
    finally:
        seen.done.set()
        kafka_broker.stop(broker)
    assert seen.holding == set()
    assert len(seen.mentioning) >= 2, seen.mentioning  # the storage tool's and the node's were both read
    assert not [p for p in Path(broker.home).rglob("*") if p.is_file() and PASSWORD in p.read_text(errors="replace")
                and p != broker.config_file]  # the password is only in the node's own configuration
    assert broker.config_file.stat().st_mode & 0o777 == 0o600
