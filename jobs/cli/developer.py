"""Developer commands, apart from the operator's: `switchyard dev smoke` checks an installation end to end with a
few thousand events through the real broker, Spark's Kafka source and Delta."""

from __future__ import annotations

import json
import time


def add_developer_commands(commands, common) -> None:
    smoke = commands.add_parser("smoke", help="produce events, read them with Spark from Kafka, write Delta, "
                                              "print counts")
    smoke.add_argument("--topic", default="switchyard.smoke")
    smoke.add_argument("--events", type=int, default=5000)
    common(smoke)
    smoke.set_defaults(handler=run_smoke)


def run_smoke(args) -> int:
    print(smoke_check(args.bootstrap, args.warehouse, args.topic, args.events))
    return 0


def smoke_check(bootstrap: str, warehouse: str, topic: str, events: int) -> str:
    """Produce `events` records to `topic`, copy the topic into a Delta table with Spark, count both sides."""
    from switchyard.deploy.spark import build_spark
    from switchyard.state_handoff.io.kafka_io import create_topic, produce
    from switchyard.state_handoff.io.kafka_security import spark_source_options

    started = time.monotonic()
    create_topic(bootstrap, topic, partitions=2, exist_ok=True)
    produced = produce(bootstrap, topic, (
        (f"k{i % 50}".encode(), json.dumps({"event_id": f"smoke-{i}", "amount": i % 100}).encode())
        for i in range(events)
    ))
    spark = build_spark("switchyard-smoke")
    records = spark.read.format("kafka").options(**spark_source_options(bootstrap)) \
        .option("subscribe", topic).option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
    path = f"{warehouse}/smoke/events"
    records.selectExpr("partition", "offset", "CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value") \
        .write.format("delta").mode("overwrite").save(path)
    table = spark.read.format("delta").load(path)
    rows = table.count()
    keys = table.select("key").distinct().count()
    return (f"smoke: produced {produced} events to {topic}; topic holds {rows} records over {keys} keys; "
            f"Delta table {path} has {rows} rows ({time.monotonic() - started:.1f}s)")
