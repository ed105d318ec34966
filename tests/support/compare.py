"""Comparisons of switchyard's Delta tables with the oracle's expectations."""

from __future__ import annotations

import math
from datetime import timedelta
from types import SimpleNamespace

from tests.support import oracle


def rows(spark, path):
    return spark.read.format("delta").load(path).collect()


def close(a: float, b: float, scale: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9 * max(scale, 1.0))


def key_of_row(row, keys: tuple[str, ...] = ("key",)):
    """A row's key as the oracle keys its events: the `key` column, or the tuple of a composite key's columns."""
    return row[keys[0]] if len(keys) == 1 else tuple(row[k] for k in keys)


def assert_state_matches(spark, tables, expected: oracle.Expected, renamed: dict[str, str] | None = None,
                         keys: tuple[str, ...] = ("key",)):
    """`renamed`: a state column by the demo's name for it, where a changed definition renamed it; `keys`: the
    state's key columns (the oracle's `key_of` keys its events alike)."""
    by_key = {key_of_row(r, keys): r for r in rows(spark, tables.state)}
    assert set(by_key) == set(expected.state)
    for key, want in expected.state.items():
        row = by_key[key].asDict()
        got = SimpleNamespace(**{name: row[(renamed or {}).get(name, name)] for name in (
            "event_count", "amount_sum", "amount_min", "amount_max", "last_event_time", "last_amount")})
        assert got.event_count == want.event_count, key
        assert close(got.amount_sum, want.amount_sum, want.amount_abs), (key, got.amount_sum, want.amount_sum)
        assert (got.amount_min, got.amount_max) == (want.amount_min, want.amount_max), key
        assert (got.last_event_time, got.last_amount) == (want.last[2], want.last[3]), key


def assert_windows_match(spark, path, expected_windows: dict, size: timedelta = timedelta(hours=1),
                         keys: tuple[str, ...] = ("key",)):
    by_window = {(key_of_row(r, keys), r.window_start): r for r in rows(spark, path)}
    assert set(by_window) == set(expected_windows)
    for k, want in expected_windows.items():
        got = by_window[k]
        assert got.window_end == k[1] + size
        assert got.event_count == want.event_count, k
        assert close(got.amount_sum, want.amount_sum, want.amount_abs), k
        if "amount_max" in got.__fields__:  # a pipeline whose windows keep it too
            assert got.amount_max == want.amount_max, k


def updates_topic_differences(spark, bootstrap: str, tables,
                              keys: tuple[str, ...] = ("key",)) -> tuple[int, list[str]]:
    """Once the stream is drained (or a cut committed with none after it): each key's newest record on the updates
    topic is its `state` row (every column but `update_version`, written as the topic writes them), and a key the
    topic tombstoned is not in `state` (a key no stream ever changed has no record: the topic carries changes).
    Returns the keys compared and what differs."""
    import json

    from kafka import KafkaConsumer, TopicPartition
    from pyspark.sql import functions as F

    from switchyard.jobs.seed import UPDATE_VERSION
    from switchyard.state_handoff.control.view import PipelineView
    from switchyard.state_handoff.stream.update_records import JSON_OPTIONS, update_key

    topic = PipelineView.read(tables).updates_topic
    if topic is None:
        return 0, []
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        ends = consumer.end_offsets(parts)
        newest = {}
        while any(consumer.position(tp) < ends[tp] for tp in parts):
            for batch in consumer.poll(timeout_ms=2000).values():
                for record in batch:  # a key lives in one partition: its records come in offset order
                    newest[record.key.decode()] = None if record.value is None else json.loads(record.value)
    finally:
        consumer.close()
    state = spark.read.format("delta").load(tables.state)
    shown = state.select(update_key(list(keys)).cast("string").alias("k"),
                         F.to_json(F.struct(*[F.col(c) for c in state.columns]), JSON_OPTIONS).alias("v")).collect()
    expected = {r.k: {c: v for c, v in json.loads(r.v).items() if c != UPDATE_VERSION} for r in shown}
    carried = {k: {c: v for c, v in value.items() if c != UPDATE_VERSION}
               for k, value in newest.items() if value is not None}
    stale = {k: (value, expected.get(k)) for k, value in carried.items() if value != expected.get(k)}
    found = [f"{len(stale)} of {len(carried)} keys stale on {topic}, e.g. (topic, state): "
             f"{next(iter(stale.items()))}"] if stale else []
    gone = {k for k, value in newest.items() if value is None}
    if gone & set(expected):
        found.append(f"keys tombstoned on {topic} but in state: {sorted(gone & set(expected))[:5]}")
    return len(carried), found


def assert_updates_topic_matches_state(spark, bootstrap: str, tables, keys: tuple[str, ...] = ("key",)) -> int:
    """updates_topic_differences, asserted: returns the keys compared."""
    compared, found = updates_topic_differences(spark, bootstrap, tables, keys)
    assert not found, "\n".join(found)
    return compared
