"""One SparkSession and one real Kafka broker (on a free 127.0.0.1 port) for the whole test session; the local
Spark cluster, three-node Kafka and object store for the tests that ask for them (each started once per module
or session by its fixture in tests/support/)."""

from __future__ import annotations

import os
import uuid

import pytest

from switchyard.deploy import kafka_broker
from switchyard.deploy.spark import build_spark
from tests.support.kafka_cluster import kafka_cluster3, sasl_env, sasl_kafka_cluster3  # noqa: F401 (fixtures)
from tests.support.objectstore import objectstore, s3a_spark  # noqa: F401 (fixtures)
from tests.support.ports import free_port_pair
from tests.support.registry import registry  # noqa: F401 (fixture)
from tests.support.spark_cluster import spark_cluster  # noqa: F401 (fixture)
from tests.support.spark_connect import spark_connect  # noqa: F401 (fixture)

# Streams in tests (in process or in a `switchyard stream` subprocess) keep two state-store partitions, as the test
# profile keeps two shuffle partitions: small batches on a busy 2-core machine. The shipped default is 4.
os.environ.setdefault("SWITCHYARD_STATE_PARTITIONS", "2")


# `make test` runs each file on one of two workers (--dist loadfile), in the order collected (--no-loadscope-reorder):
# the files that take longest start first, so that the last ones to start are short and neither worker waits long
# for the other at the end. By their time in `make test` (pytest's --durations=0, summed per file), longest first;
# the files not named follow in the order collected.
LONGEST_FIRST = (
    "tests/jobs/test_redeploy.py",
    "tests/jobs/test_stream.py",
    "tests/jobs/test_rebase.py",
    "tests/jobs/test_crash_points.py",
    "tests/deploy/test_tutorial.py",
    "tests/jobs/test_backfill.py",
    "tests/deploy/test_wheel.py",
    "tests/orchestration/test_orchestration.py",
    "tests/jobs/test_avro_registry.py",
    "tests/campaign/test_campaign.py",
    "tests/orchestration/test_orchestration_ui.py",
    "tests/jobs/test_rebase_failures.py",
    "tests/jobs/test_serve.py",
    "tests/jobs/test_rebase_interleaving.py",
    "tests/jobs/test_rebase_retention.py",
    "tests/jobs/test_avro_input.py",
    "tests/deploy/test_spark_session.py",
    "tests/deploy/test_spark_connect.py",
    "tests/orchestration/test_orchestration_live.py",
    "tests/jobs/test_event_time_range.py",
    "tests/jobs/test_handoff_time_mode.py",
    "tests/deploy/test_objectstore.py",
    "tests/jobs/test_kafka_input.py",
    "tests/jobs/test_bad_records_once.py",
    "tests/deploy/test_schema_registry.py",
    "tests/jobs/test_kafka_oauth.py",
    "tests/jobs/test_retention.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {path: i for i, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))  # stable: a file's tests keep order


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    broker = kafka_broker.Broker.at(free_port_pair(), tmp_path_factory.mktemp("kafka"))
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
