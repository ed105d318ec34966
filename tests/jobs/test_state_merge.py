"""The state query's MERGE only moves a key forward (jobs/stream/state.py): the state sink fed a key's updates out
of order, across batches and within one, keeps the newest by version. Real Spark and Delta, no Kafka: the sink's
input is the updates topic's rows as the keyed query writes them."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from pyspark.sql import functions as F

from switchyard.jobs.delta_txn import TxnApp
from switchyard.jobs.seed import EVENTS_SEEN, UPDATE_VERSION
from switchyard.jobs.stream.keyed import keyed_input, merged_state, update_messages
from switchyard.jobs.stream.state import StateSink
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.compare import rows

PIPELINE = get_pipeline("demo")
HANDOFF = "h-merge"
BASE = 7 << 32  # a handoff's first version


def _records(spark, amounts: list[float]):
    values = [(0, i, datetime(2026, 1, 2, tzinfo=timezone.utc),
               json.dumps({"event_id": f"e{i}", "key": "k", "event_time": f"2026-01-02T00:0{i}:00Z",
                           "amount": a}).encode()) for i, a in enumerate(amounts)]
    return spark.createDataFrame(values, "kafka_partition INT, kafka_offset BIGINT, kafka_timestamp TIMESTAMP, "
                                         "value BINARY")


def _state_after(spark, amounts: list[float]):
    """The key's whole state after the stream's events `amounts`, with its version, as the keyed query has it."""
    merged = merged_state(PIPELINE, keyed_input(PIPELINE, parse_events(PIPELINE, _records(spark, amounts))))
    return merged.withColumn(UPDATE_VERSION, F.lit(BASE).cast("long") + F.col(EVENTS_SEEN)).drop(EVENTS_SEEN)


def _messages(spark, *updates):
    """(state, offset) pairs as the updates topic's rows: key, value, headers, offset."""
    frames = [update_messages(PIPELINE, state, HANDOFF).withColumn("offset", F.lit(offset).cast("long"))
              for state, offset in updates]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame)
    return out


def test_the_state_merge_never_moves_a_key_back(spark, tmp_path):
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    one, three = _state_after(spark, [1.0]), _state_after(spark, [1.0, 2.0, 3.0])
    # the state as the backfill writes it: version 0
    one.withColumn(UPDATE_VERSION, F.lit(0).cast("long")).write.format("delta").save(tables.state)
    schema = spark.read.format("delta").load(tables.state).schema
    sink = StateSink(PIPELINE, tables, schema, HANDOFF, TxnApp("test-state", str(tmp_path / "none"), missing="x"))

    def count() -> int:
        (row,) = rows(spark, tables.state)
        return row.event_count

    sink(_messages(spark, (three, 10)), 0)
    assert count() == 3
    sink(_messages(spark, (one, 11)), 1)  # an older state arriving later (another partition, a fenced writer)
    assert count() == 3, "an older update moved the key back"
    four = _state_after(spark, [1.0, 2.0, 3.0, 4.0])
    sink(_messages(spark, (four, 12), (three, 13)), 2)  # both in one batch, the older one at the higher offset
    assert count() == 4, "the batch's newest update was chosen by offset, not by version"
