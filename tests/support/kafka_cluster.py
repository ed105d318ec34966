"""A local three-node Kafka cluster for tests, on free 127.0.0.1 ports and in a SWITCHYARD_HOME of its own, stopped
(no JVM left) when its scope ends. A test asks for the `kafka_cluster3` fixture (registered in tests/conftest.py)
(plain) or `sasl_kafka_cluster3` with the `sasl_env` fixture around the clients; `RunningKafka.env()` is the
environment of a `switchyard` command that talks to it."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from switchyard.deploy import kafka_cluster
from switchyard.deploy.local_server import free_ports
from switchyard.deploy.paths import PROJECT_ROOT

BROKERS = 3
SASL_ENV = {
    "SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "SWITCHYARD_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "SWITCHYARD_KAFKA_SASL_USERNAME": "switchyard-admin",
    "SWITCHYARD_KAFKA_SASL_PASSWORD": "test-only.s3cret",
}


@contextmanager
def kafka_environment(settings: dict[str, str]) -> Iterator[None]:
    """`settings` in os.environ for the block (the project's clients read SWITCHYARD_KAFKA_* from there)."""
    before = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass(frozen=True)
class RunningKafka:
    cluster: kafka_cluster.Cluster
    home: Path  # the SWITCHYARD_HOME the CLI finds the cluster in
    security: dict[str, str]

    @property
    def bootstrap(self) -> str:
        return self.cluster.bootstrap

    @property
    def port(self) -> int:
        return self.cluster.port

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a `switchyard` command against this cluster."""
        plain = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_KAFKA_")}
        return {**plain, "SWITCHYARD_HOME": str(self.home), "SWITCHYARD_BOOTSTRAP": self.bootstrap,
                **self.security, **extra}


@contextmanager
def running_kafka(root: Path, brokers: int = BROKERS, security: dict[str, str] | None = None) -> Iterator[RunningKafka]:
    """Start a cluster of `brokers` nodes (SASL/SCRAM when `security` is given), yield it, stop every node."""
    home = root / "home"
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "jars").exists():
        (home / "jars").symlink_to(PROJECT_ROOT / ".switchyard" / "jars")  # reuse the fetched jars
    port = free_ports(2 * brokers)
    cluster = kafka_cluster.at(port, brokers, home / "kafka" / f"cluster-{port}")  # where the CLI looks
    running = RunningKafka(cluster, home, dict(security or {}))
    try:
        with kafka_environment(running.security):
            kafka_cluster.start(cluster, sasl=bool(security))
        yield running
    finally:
        kafka_cluster.stop(cluster)


@pytest.fixture(scope="module")
def kafka_cluster3(tmp_path_factory) -> Iterator[RunningKafka]:
    with running_kafka(tmp_path_factory.mktemp("kafka3")) as running:
        yield running


@pytest.fixture(scope="module")
def sasl_kafka_cluster3(tmp_path_factory) -> Iterator[RunningKafka]:
    with running_kafka(tmp_path_factory.mktemp("kafka3-sasl"), security=SASL_ENV) as running:
        yield running


@pytest.fixture
def sasl_env() -> Iterator[dict[str, str]]:
    """The SASL settings in this process's environment for one test."""
    with kafka_environment(SASL_ENV):
        yield SASL_ENV
