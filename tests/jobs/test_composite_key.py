"""A pipeline keyed by two fields, one at a nested path, through backfill, handoff, stream and an offline rebase:
its state, windows and updates topic against plain Python over the topic, every record aggregated or
dead-lettered."""

from __future__ import annotations

import io
import json
import statistics
from collections import defaultdict
from datetime import timedelta

import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.rebase.run import rebase_pipeline
from switchyard.jobs.stream import StreamOptions, run_stream
from switchyard.jobs.stream.updates_topic import last_started_with
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.language.spec import Field, Pipeline, TumblingWindows, count, first, last, stddev, total
from switchyard.state_handoff.tables import Tables
from tests.support import oracle

PIPELINE = Pipeline(
    name="by_key_and_kind",
    key=("key", "kind"),
    event_time="event_time",
    event_id="event_id",
    fields=(Field("event_id", "string", required=False), Field("key", "string"), Field("kind", "string"),
            Field("event_time", "timestamp"), Field("amount", "number")),
    aggregations=(count("events"), total("amount_sum", "amount"), first("first_amount", "amount"),
                  last("last_amount", "amount"), stddev("amount_sd", "amount")),
    windows=TumblingWindows(size=timedelta(minutes=30), allowed_lateness=timedelta(minutes=10),
                            aggregations=(count("events"),)),
)
TOPIC = "composite.key"


def _quiet(*_):
    pass


def _expected(records) -> tuple[dict, int]:
    """Per (key, kind): count, sum, the amounts of the first and last events by (event_time, event_id), and the
    amounts' sample variance (None below two)."""
    groups, malformed = defaultdict(list), 0
    for r in records:
        reason, event = oracle.classify_fields(r.value, PIPELINE.fields)
        if reason:
            malformed += 1
            continue
        groups[(event["key"], event["kind"])].append(event)

    def order(e):
        return e["event_time"], (0, "") if e["event_id"] is None else (1, e["event_id"]), e["amount"]

    return {k: (len(es), sum(e["amount"] for e in es), min(es, key=order)["amount"], max(es, key=order)["amount"],
                statistics.variance([e["amount"] for e in es]) if len(es) > 1 else None)
            for k, es in groups.items()}, malformed


def _state(tables: Tables) -> dict:
    return {(r["key"], r["kind"]): r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}


def _matches(tables: Tables, expected: dict) -> None:
    state = _state(tables)
    assert set(state) == set(expected)
    for k, (n, amount_sum, first_amount, last_amount, amount_variance) in expected.items():
        row = state[k]
        assert (row["events"], row["first_amount"], row["last_amount"]) == (n, first_amount, last_amount), k
        assert row["amount_sum"] == pytest.approx(amount_sum, rel=1e-9, abs=1e-6), k
        # the standard deviation's mergeable parts: count, sum and M2 (the squared deviations' sum)
        assert row["amount_sd__count"] == n
        if amount_variance is not None:
            assert row["amount_sd__m2"] / (n - 1) == pytest.approx(amount_variance, rel=1e-9), k


@pytest.mark.timeout(1800)
def test_a_composite_key_through_backfill_stream_and_rebase(spark, bootstrap, tmp_path):
    run_generate(bootstrap, TOPIC, events=600, keys=8, partitions=2, days=1, seed=21, malformed_rate=0.05,
                 out=io.StringIO())
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, TOPIC, archive_cut(bootstrap, TOPIC, fraction=0.7), out=_quiet)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    run_stream(spark, PIPELINE, tables, bootstrap,
               StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=_quiet)

    records = oracle.read_topic(bootstrap, TOPIC)
    expected, malformed = _expected(records)
    assert len({kind for _, kind in expected}) >= 4 and len({key for key, _ in expected}) >= 4
    _matches(tables, expected)
    dead = DeltaTable(tables.dead_letter).to_pyarrow_table().num_rows
    assert sum(n for n, *_ in expected.values()) + dead == len(records) and dead == malformed
    windowed = sum(r["events"] for name in ("windows", "window_state")
                   for r in DeltaTable(tables.path(name)).to_pyarrow_table().to_pylist())
    late = DeltaTable(tables.late).to_pyarrow_table().num_rows
    assert windowed + late == sum(n for n, *_ in expected.values())

    # the updates topic's records are keyed by both fields, as a JSON object
    consumer = KafkaConsumer(last_started_with(tables), bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    keys = [json.loads(m.key) for m in consumer]
    consumer.close()
    assert keys and all(set(k) == {"key", "kind"} for k in keys)
    assert {(k["key"], k["kind"]) for k in keys} <= set(expected)

    # an offline rebase recomputes the state at a cut and reconciles it key by key: no difference
    new = rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "test", lambda: spark, out=_quiet)
    committed = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED, handoff_id=new.handoff_id))
    assert committed.reconciliation["keys_different"] == 0, committed.reconciliation
    assert committed.reconciliation["keys_recomputed"] == len(expected)
    _matches(tables, expected)
