"""Kafka's own tools see a stream: the input offsets it has processed are committed to a consumer group, so
`kafka-consumer-groups --describe` shows its lag, going to 0 as it catches up."""

from __future__ import annotations

import subprocess
from datetime import datetime

from switchyard.deploy.jars import kafka_classpath
from switchyard.deploy.java import java_executable
from switchyard.state_handoff.control.handoffs import current_handoff
from switchyard.state_handoff.io.kafka_io import offset_bounds, produce
from tests.jobs.test_rebase_failures import _prepare
from tests.support.streams import stream_until_caught_up, tail_events

TOOL = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def kafka_consumer_groups(bootstrap: str, group: str) -> str:
    """`kafka-consumer-groups.sh --describe --group GROUP`: the class the script runs, on the broker's classpath."""
    done = subprocess.run([java_executable(), "-cp", kafka_classpath(), TOOL, "--bootstrap-server", bootstrap,
                           "--describe", "--group", group], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def _lag_rows(described: str, topic: str) -> dict[int, tuple[int, int, int]]:
    """Per partition of `topic`: (CURRENT-OFFSET, LOG-END-OFFSET, LAG) from the tool's table."""
    lines = [line.split() for line in described.splitlines() if line.strip()]
    header = next(line for line in lines if "CURRENT-OFFSET" in line)
    at = {name: header.index(name) for name in ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG")}
    return {int(row[at["PARTITION"]]): (int(row[at["CURRENT-OFFSET"]]), int(row[at["LOG-END-OFFSET"]]),
                                        int(row[at["LAG"]]))
            for row in lines if len(row) == len(header) and row[at["TOPIC"]] == topic}


def test_kafkas_own_tool_shows_the_streams_lag_going_to_zero(spark, bootstrap, topic_name, tmp_path, monkeypatch):
    group = f"switchyard.test.{topic_name}"
    monkeypatch.setenv("SWITCHYARD_CONSUMER_GROUP", group)
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=71))
    assert "not found" in kafka_consumer_groups(bootstrap, group), "no group before the stream"

    stream_until_caught_up(spark, tables, bootstrap)
    ends = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic_name).items()}
    described = kafka_consumer_groups(bootstrap, group)
    assert _lag_rows(described, topic_name) == {p: (hi, hi, 0) for p, hi in ends.items()}, described
    assert all(ends[p] > o for p, o in current_handoff(tables).start_offsets.items()), "the stream read some"

    more = tail_events(2, datetime(2026, 1, 3, 2), 20, seed=72)
    produce(bootstrap, topic_name, more)
    behind = _lag_rows(kafka_consumer_groups(bootstrap, group), topic_name)
    assert sum(lag for _, _, lag in behind.values()) == len(more), "new records are the group's lag until streamed"
    stream_until_caught_up(spark, tables, bootstrap)
    ends = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic_name).items()}
    assert _lag_rows(kafka_consumer_groups(bootstrap, group), topic_name) == {p: (hi, hi, 0) for p, hi in ends.items()}
