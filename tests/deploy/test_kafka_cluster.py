"""Three KRaft nodes: topics the project creates are replicated (RF 3, min.insync.replicas 2), the project's clients
ride out a node going down and the node rejoins; with SASL/SCRAM a client without credentials is refused while the
project's clients (kafka-python, Spark's Kafka source and sink) get in with the SWITCHYARD_KAFKA_* settings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from switchyard.deploy.local_server import free_ports
from switchyard.deploy.paths import PROJECT_ROOT
from switchyard.jobs.backfill import kafka_range
from switchyard.jobs.stream.keyed import update_messages
from switchyard.state_handoff.io.kafka_io import admin_client, create_topic, offset_bounds, produce, topic_config
from switchyard.state_handoff.io.kafka_security import spark_options
from switchyard.state_handoff.language.pipelines import get_pipeline
from tests.support.oracle import read_topic

ISR_TIMEOUT_S = 60


def cli(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *args], capture_output=True, text=True, env=env,
                          cwd=PROJECT_ROOT, timeout=timeout)


def _one_line_error(result: subprocess.CompletedProcess, codes: tuple[int, ...] = (2,)) -> str:
    assert result.returncode in codes, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def _isr(bootstrap: str, topic: str) -> dict[int, list[int]]:
    with admin_client(bootstrap) as admin:
        described = admin.describe_topics([topic])[0]
    return {p["partition"]: sorted(p["isr"]) for p in described["partitions"]}


def _wait_for_isr(bootstrap: str, topic: str, nodes: list[int]) -> None:
    deadline = time.monotonic() + ISR_TIMEOUT_S
    while (isr := _isr(bootstrap, topic)) != {p: nodes for p in isr}:
        assert time.monotonic() < deadline, f"in-sync replicas not {nodes} within {ISR_TIMEOUT_S}s: {isr}"
        time.sleep(0.5)


def _records(n: int, tag: str) -> list[tuple[bytes, bytes]]:
    return [(f"k{i % 7}".encode(), json.dumps({"event_id": f"{tag}-{i}"}).encode()) for i in range(n)]


def test_created_topics_have_three_replicas_and_two_in_sync(kafka_cluster3, topic_name):
    create_topic(kafka_cluster3.bootstrap, topic_name, partitions=3)
    deadline = time.monotonic() + 60  # a new client may ask a broker that lags (create_topic names it on stderr)
    while True:
        with admin_client(kafka_cluster3.bootstrap) as admin:
            partitions = admin.describe_topics([topic_name])[0]["partitions"]
        if len(partitions) == 3 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(partitions) == 3
    assert all(sorted(p["replicas"]) == [0, 1, 2] for p in partitions), partitions
    assert topic_config(kafka_cluster3.bootstrap, topic_name)["min.insync.replicas"] == "2"


def test_cli_reports_every_node(kafka_cluster3):
    result = cli("dev", "kafka", "status", "--port", str(kafka_cluster3.port), env=kafka_cluster3.env())
    assert result.returncode == 0, result
    for k in range(3):
        assert f"kafka node {k} on 127.0.0.1:{kafka_cluster3.port + 2 * k} is up" in result.stdout, result.stdout


def test_clients_ride_out_a_node_down_and_the_node_rejoins(kafka_cluster3, topic_name):
    bootstrap, port, env = kafka_cluster3.bootstrap, str(kafka_cluster3.port), kafka_cluster3.env()
    create_topic(bootstrap, topic_name, partitions=3)
    before = _records(300, "before")
    assert produce(bootstrap, topic_name, before) == 300

    down = cli("dev", "kafka", "stop", "--node", "1", "--port", port, env=env)
    assert down.returncode == 0 and "kafka node 1" in down.stdout and "stopped" in down.stdout, down
    try:
        _wait_for_isr(bootstrap, topic_name, [0, 2])
        during = _records(300, "during")
        assert produce(bootstrap, topic_name, during) == 300  # acks=all: two in sync are enough
        assert sum(hi - lo for lo, hi in offset_bounds(bootstrap, topic_name).values()) == 600
        read = read_topic(bootstrap, topic_name)
        assert sorted(r.value for r in read) == sorted(v for _, v in before + during)
    finally:
        up = cli("dev", "kafka", "start", "--node", "1", "--port", port, env=env)
    assert up.returncode == 0 and "kafka node 1" in up.stdout and "started" in up.stdout, up

    _wait_for_isr(bootstrap, topic_name, [0, 1, 2])
    assert len(read_topic(bootstrap, topic_name)) == 600


def test_client_without_credentials_is_refused(sasl_kafka_cluster3):
    started = time.monotonic()
    with pytest.raises(KafkaError):
        KafkaAdminClient(bootstrap_servers=sasl_kafka_cluster3.bootstrap, request_timeout_ms=5000).list_topics()
    assert time.monotonic() - started < 30

    without = {name: "" for name in sasl_kafka_cluster3.security}
    refused = cli("dev", "generate", "--topic", "refused", "--events", "10", "--keys", "2",
                  env=sasl_kafka_cluster3.env(**without), timeout=60)
    # a client cannot tell a listener that hangs up on it (no credentials) from a broker that is away: "not now" (75),
    # retried by `switchyard serve`; a refusal it can tell is 2. Either way one line naming the settings to check.
    line = _one_line_error(refused, codes=(2, 75))
    assert "as a PLAINTEXT client" in line and "SWITCHYARD_KAFKA_" in line, line

    wrong = cli("dev", "generate", "--topic", "refused", "--events", "10", "--keys", "2",
                env=sasl_kafka_cluster3.env(SWITCHYARD_KAFKA_SASL_PASSWORD="not-the-password"), timeout=60)
    assert "SASL_PLAINTEXT/SCRAM-SHA-512 (user switchyard-admin)" in _one_line_error(wrong, codes=(2, 75))


def test_project_clients_get_in_with_the_settings(sasl_kafka_cluster3, sasl_env, spark, topic_name):
    bootstrap = sasl_kafka_cluster3.bootstrap
    create_topic(bootstrap, topic_name, partitions=2)
    sent = _records(200, "sasl")
    produce(bootstrap, topic_name, sent)
    assert sorted(r.value for r in read_topic(bootstrap, topic_name)) == sorted(v for _, v in sent)

    ends = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic_name).items()}
    read_by_spark = kafka_range(spark, bootstrap, topic_name, {}, ends, with_key=True).collect()
    assert sorted(bytes(r.value) for r in read_by_spark) == sorted(v for _, v in sent)

    pipeline = get_pipeline("demo")
    updates_topic = f"{pipeline.name}.updates.{topic_name}"
    create_topic(bootstrap, updates_topic, partitions=2, exist_ok=True, compacted=True)
    changed = spark.createDataFrame([("k1", 3), ("k2", 5)], f"{pipeline.key} STRING, event_count LONG")
    (update_messages(pipeline, changed, "h-sasl").write.format("kafka")  # as the keyed query's sink writes
     .options(**spark_options(bootstrap)).option("kafka.acks", "all").option("topic", updates_topic).save())
    updates = read_topic(bootstrap, updates_topic)
    assert sorted(r.key for r in updates) == [b"k1", b"k2"]
    assert {json.loads(r.value)["event_count"] for r in updates} == {3, 5}


def test_sasl_start_needs_the_settings(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(PROJECT_ROOT / ".switchyard" / "jars")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_KAFKA_")},
           "SWITCHYARD_HOME": str(home)}
    result = cli("dev", "kafka", "start", "--brokers", "3", "--sasl", "--port", str(free_ports(6)), env=env,
                 timeout=60)
    line = _one_line_error(result)
    assert "SWITCHYARD_KAFKA_SECURITY_PROTOCOL=SASL_PLAINTEXT" in line and "SWITCHYARD_KAFKA_SASL_PASSWORD" in line
