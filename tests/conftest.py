"""One SparkSession and one real Kafka broker (on a free 127.0.0.1 port) for the whole test session."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

from deploy import kafka_broker
from deploy.local_server import port_free
from deploy.spark import build_spark

# Streams in tests (in process or in a `switchyard stream` subprocess) keep two state-store partitions, as the test
# profile keeps two shuffle partitions: small batches on a busy 2-core machine. The shipped default is 4.
os.environ.setdefault("SWITCHYARD_STATE_PARTITIONS", "2")


def _free_port_pair() -> int:
    for _ in range(50):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port < 65000 and port_free(port) and port_free(port + 1):
            return port
    raise RuntimeError("no free port pair on 127.0.0.1")


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    broker = kafka_broker.Broker.at(_free_port_pair(), tmp_path_factory.mktemp("kafka"))
    kafka_broker.start(broker)
    os.environ["SWITCHYARD_BOOTSTRAP"] = broker.bootstrap
    yield broker
    kafka_broker.stop(broker)


@pytest.fixture(scope="session")
def bootstrap(broker) -> str:
    return broker.bootstrap


@pytest.fixture(scope="session")
def spark():
    session = build_spark("switchyard-tests", profile="test")
    yield session
    session.stop()


@pytest.fixture
def topic_name(request) -> str:
    return f"t.{request.node.name[:40]}.{uuid.uuid4().hex[:8]}".replace("[", "_").replace("]", "_")
