"""Beyond one machine, all at once: the switch (backfill -> handoff -> stream, with malformed and late records) on a
Spark standalone master with two workers (one working outside the checkout), a three-node Kafka and a warehouse on
the S3-compatible object store, with one Kafka node stopped mid-stream and started again. The result equals the
oracle's, read back from the object store."""

from __future__ import annotations

from datetime import datetime

import pytest

from switchyard.deploy import kafka_cluster
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.kafka_io import produce, topic_config
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.spark_cluster import run_cli
from tests.support.streams import (QUIET, assert_matches_oracle, latest_total, start_stream, stop_stream, stream_read,
                                   tail_events, wait_until)

PIPELINE = get_pipeline("demo")
TOPIC = "scale-out.events"


@pytest.mark.extended  # make test keeps each part: executors on the cluster, the three brokers, the store's commits
def test_the_switch_on_a_cluster_three_brokers_and_an_object_store(  # noqa: F811
        spark_cluster, kafka_cluster3, objectstore, s3a_spark, tmp_path):
    bootstrap, warehouse = kafka_cluster3.bootstrap, objectstore.warehouse()
    env = spark_cluster.env(**objectstore.env)
    common = ["--pipeline", PIPELINE.name, "--warehouse", warehouse, "--bootstrap", bootstrap]

    run_generate(bootstrap, TOPIC, events=1500, keys=25, partitions=3, days=2, seed=11, malformed_rate=0.03,
                 out=QUIET)
    assert topic_config(bootstrap, TOPIC).get("min.insync.replicas") == "2"
    for step in (["archive", *common, "--topic", TOPIC, "--fraction", "0.8"], ["backfill", *common],
                 ["handoff", *common]):
        result = run_cli(step, env, timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
    tables = Tables(warehouse, PIPELINE.name)
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, "--tables-trigger-seconds", "1", env=env)
    try:
        produce(bootstrap, TOPIC, tail_events(3, datetime(2026, 1, 2, 20), 120, seed=12))
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, proc, log,
                   what="SWITCHED", timeout=600)
        kafka_cluster.stop_node(kafka_cluster3.cluster, 1)  # mid-stream: two of three replicas stay in sync
        try:
            produce(bootstrap, TOPIC, tail_events(3, datetime(2026, 1, 2, 22), 120, seed=13))
            total = latest_total(bootstrap, TOPIC, handoff_log.offsets(handoff))
            wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read "
                       "with node 1 down", timeout=600)
        finally:
            kafka_cluster.start_node(kafka_cluster3.cluster, 1)
        produce(bootstrap, TOPIC, tail_events(3, datetime(2026, 1, 2, 23), 60, seed=14))
        total = latest_total(bootstrap, TOPIC, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read", timeout=600)
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, proc, log,
                   what="CAUGHT_UP", timeout=600)
    finally:
        stop_stream(proc, log)

    # Each command ran as an application of the cluster, with executors on the worker outside the checkout.
    applications = [d.name for d in spark_cluster.elsewhere.iterdir() if d.name.startswith("app-")]
    assert len(applications) >= 4, applications
    assert storage.exists(storage.join(tables.stream_dir, handoff.handoff_id, "checkpoints", "keyed", "commits", "0"))
    statuses = [e.status for e in handoff_log.entries(tables)]
    assert "SWITCHED" in statuses and statuses[-1] == "STOPPED" and "FAILED" not in statuses
    assert_matches_oracle(s3a_spark, bootstrap, TOPIC, tables)
