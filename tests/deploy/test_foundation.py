"""The real components work together: Delta on Spark, the KRaft broker, Spark's Kafka source, streaming into Delta."""

from __future__ import annotations

import json
import re

from switchyard.state_handoff.io.kafka_io import create_topic, offset_bounds, produce


def test_delta_write_read_and_time_travel(spark, tmp_path):
    path = str(tmp_path / "t")
    spark.range(5).write.format("delta").save(path)
    spark.range(5, 12).write.format("delta").mode("append").save(path)
    assert spark.read.format("delta").load(path).count() == 12
    version0 = spark.read.format("delta").option("versionAsOf", 0).load(path)
    assert sorted(r.id for r in version0.collect()) == [0, 1, 2, 3, 4]


def _produce_numbered(bootstrap, topic, n, partitions):
    create_topic(bootstrap, topic, partitions=partitions)
    return produce(bootstrap, topic, ((f"k{i}".encode(), json.dumps({"i": i}).encode(), i % partitions, None)
                                      for i in range(n)))


def test_kafka_python_round_trip(bootstrap, topic_name):
    from kafka import KafkaConsumer

    assert _produce_numbered(bootstrap, topic_name, 1000, partitions=3) == 1000
    consumer = KafkaConsumer(topic_name, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    seen = sorted(json.loads(m.value)["i"] for m in consumer)
    consumer.close()
    assert seen == list(range(1000))
    assert {p: hi for p, (lo, hi) in offset_bounds(bootstrap, topic_name).items()} == {0: 334, 1: 333, 2: 333}


def test_spark_batch_reads_exact_offset_ranges(spark, bootstrap, topic_name):
    _produce_numbered(bootstrap, topic_name, 300, partitions=2)  # i even -> p0, odd -> p1; offset = i // 2
    starting = {topic_name: {"0": 10, "1": 0}}
    ending = {topic_name: {"0": 25, "1": 7}}  # exclusive
    rows = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic_name)
            .option("startingOffsets", json.dumps(starting)).option("endingOffsets", json.dumps(ending))
            .load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v").collect())
    got = sorted((r.partition, r.offset, json.loads(r.v)["i"]) for r in rows)
    expected = sorted([(0, o, 2 * o) for o in range(10, 25)] + [(1, o, 2 * o + 1) for o in range(0, 7)])
    assert got == expected


def test_streaming_available_now_into_delta_is_exactly_once(spark, bootstrap, topic_name, tmp_path):
    _produce_numbered(bootstrap, topic_name, 200, partitions=2)
    table, checkpoint = str(tmp_path / "table"), str(tmp_path / "checkpoint")

    def run_once():
        query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                 .option("subscribe", topic_name)
                 .option("startingOffsets", json.dumps({topic_name: {"0": 50, "1": 0}}))
                 .load().selectExpr("partition", "offset", "CAST(value AS STRING) AS v")
                 .writeStream.format("delta").option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start(table))
        query.awaitTermination(180)
        assert query.exception() is None

    run_once()
    first = spark.read.format("delta").load(table)
    assert first.count() == 150
    assert first.where("partition = 0").agg({"offset": "min"}).first()[0] == 50
    run_once()
    assert spark.read.format("delta").load(table).count() == 150


def test_the_driver_maps_the_class_archive_setup_made(spark):
    """`make setup` archived the driver's classes (deploy/spark_cds.py); the test session's driver was started with
    the archive, and a JVM on the driver's classpath maps it (-Xshare:on refuses an archive it cannot map)."""
    import subprocess

    from switchyard.deploy.java import java_executable
    from switchyard.deploy.spark_cds import archive_path

    archive = archive_path()
    assert archive.exists(), f"no class archive at {archive}: deploy/setup.sh builds it"
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in arguments, arguments
    classpath = jvm.java.lang.System.getProperty("java.class.path")
    mapped = subprocess.run([java_executable(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}",
                             "-cp", classpath, "-version"],
                            capture_output=True, text=True)
    assert mapped.returncode == 0, mapped.stdout + mapped.stderr
    # it holds a stream's way, not only a session's: the Kafka clients the connector reads and sends with, the
    # admin client its offsets come from, the keyed query's state store, Delta's MERGE and the UI's server (WebUI,
    # which binds it: the JVM's dump leaves its subclass SparkUI out of some archives built from the same workload)
    listed = subprocess.run([java_executable(), "-Xshare:on", f"-XX:SharedArchiveFile={archive}",
                             "-XX:+PrintSharedArchiveAndExit", "-cp", classpath, "-version"],
                            capture_output=True, text=True)
    archived = {line.split()[1] for line in listed.stdout.splitlines() if re.match(r"\d+: \S", line)}
    wanted = {"org.apache.kafka.clients.consumer.KafkaConsumer", "org.apache.kafka.clients.producer.KafkaProducer",
              "org.apache.kafka.clients.admin.KafkaAdminClient", "org.apache.spark.sql.kafka010.KafkaSourceProvider",
              "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
              "org.apache.spark.sql.delta.commands.MergeIntoCommand", "org.apache.spark.ui.WebUI"}
    assert wanted <= archived, f"not in the archive: {sorted(wanted - archived)} ({len(archived)} classes in it)"
