"""A live stream's update latency, sampled from Kafka alone: the newest input records beside the newest updates
they caused, matched by event id; latency = the update's Kafka timestamp - the input's Kafka timestamp."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from switchyard.state_handoff.io.kafka_io import consumer
from switchyard.state_handoff.language.aggregates import LAST_BY_ID
from switchyard.state_handoff.language.spec import Pipeline

SAMPLE_PER_PARTITION = 200
# Only inputs produced this recently count: older ones in the tail are a backlog the stream caught up on, whose
# wait says how long the stream was away, not how fast it updates (offsets behind says that).
RECENT_S = 300.0


@dataclass(frozen=True)
class UpdateLatency:
    matched: int
    p50_s: float
    p99_s: float
    max_s: float


def _percentile(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _tail(client, topic: str, per_partition: int, timeout_s: float) -> list:
    """The last `per_partition` records of each partition of `topic`."""
    from kafka import TopicPartition

    parts = [TopicPartition(topic, p) for p in sorted(client.partitions_for_topic(topic) or ())]
    if not parts:
        return []
    client.assign(parts)
    begin, end = client.beginning_offsets(parts), client.end_offsets(parts)
    for tp in parts:
        client.seek(tp, max(begin[tp], end[tp] - per_partition))
    records, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(client.position(tp) < end[tp] for tp in parts):
        for batch in client.poll(timeout_ms=200).values():
            records += batch
    return records


def _json(value: bytes) -> dict:
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        return {}
    return parsed if isinstance(parsed, dict) else {}


def sample(bootstrap: str, pipeline: Pipeline, topic: str, updates_topic: str,
           per_partition: int = SAMPLE_PER_PARTITION, recent_s: float = RECENT_S,
           timeout_s: float = 30.0) -> UpdateLatency | None:
    """Latency over the newest inputs of the last `recent_s` seconds that have an update naming them; None when
    none has (no recent input, or a pipeline without a last-value aggregate, whose updates name no event)."""
    since_ms = (time.time() - recent_s) * 1000
    with consumer(bootstrap) as client:
        inputs = {_json(r.value).get(pipeline.event_id): r.timestamp
                  for r in _tail(client, topic, per_partition, timeout_s) if r.timestamp >= since_ms}
    with consumer(bootstrap) as client:
        updates = _tail(client, updates_topic, per_partition, timeout_s)
    answered: dict[str, int] = {}
    for update in updates:  # the first update naming an event is the one it caused
        event_id = _json(update.value).get(LAST_BY_ID)
        if event_id in inputs and event_id not in answered:
            answered[event_id] = update.timestamp
    latencies = sorted(max(0, answered[e] - inputs[e]) / 1000 for e in answered)
    if not latencies:
        return None
    return UpdateLatency(len(latencies), round(_percentile(latencies, 0.50), 3), round(_percentile(latencies, 0.99), 3),
                         round(latencies[-1], 3))
