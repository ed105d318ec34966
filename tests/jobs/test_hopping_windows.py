"""Hopping windows (an hour long, one every quarter hour) through backfill, handoff and stream, with records
arriving after their windows were final: each record counted in each of its four windows, or recorded late for it,
against plain Python over the topic."""

from __future__ import annotations

import io
import json
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import StreamOptions, run_stream
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.spec import Field, HoppingWindows, Pipeline, count, total
from switchyard.state_handoff.tables import Tables
from tests.support import oracle

SIZE, EVERY = timedelta(hours=1), timedelta(minutes=15)
PIPELINE = Pipeline(
    name="hopping", key="key", event_time="event_time", event_id="event_id",
    fields=(Field("event_id", "string", required=False), Field("key", "string"), Field("event_time", "timestamp"),
            Field("amount", "number")),
    aggregations=(count("events"),),
    windows=HoppingWindows(size=SIZE, every=EVERY, allowed_lateness=timedelta(minutes=10),
                           aggregations=(count("events"), total("amount_sum", "amount"))))
TOPIC = "hopping.windows"


def _quiet(*_):
    pass


def _windows_of(t: datetime) -> list[datetime]:
    step = int(EVERY.total_seconds())
    pane = datetime.fromtimestamp(int(t.replace(tzinfo=timezone.utc).timestamp()) // step * step, timezone.utc)
    return [(pane - k * EVERY).replace(tzinfo=None) for k in range(SIZE // EVERY)]


def _rows(tables: Tables, name: str) -> list[dict]:
    return DeltaTable(tables.path(name)).to_pyarrow_table().to_pylist()


def _naive(t: datetime) -> datetime:
    return t.astimezone(timezone.utc).replace(tzinfo=None)


@pytest.mark.timeout(1800)
def test_hopping_windows_count_each_record_in_each_of_its_windows_or_late(spark, bootstrap, tmp_path):
    run_generate(bootstrap, TOPIC, events=500, keys=6, partitions=2, days=1, seed=41, malformed_rate=0.02,
                 out=io.StringIO())
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, TOPIC, archive_cut(bootstrap, TOPIC, fraction=0.7), out=_quiet)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    backlog_windows = _rows(tables, "windows") + _rows(tables, "window_state")
    assert backlog_windows and all(r["window_end"] - r["window_start"] == SIZE for r in backlog_windows)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    settings = StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1)
    run_stream(spark, PIPELINE, tables, bootstrap, settings, out=_quiet)

    # records for windows long final, and one whose newest window is still open
    records = oracle.read_topic(bootstrap, TOPIC)
    newest = max(e["event_time"] for r in records
                 for reason, e in [oracle.classify_fields(r.value, PIPELINE.fields)] if not reason)
    stamps = [newest - timedelta(hours=3), newest - timedelta(hours=2, minutes=50), newest - timedelta(minutes=40)]
    produce(bootstrap, TOPIC, [(b"k-late", json.dumps({"event_id": f"late{i}", "key": "k-late", "amount": 1.0,
                                                        "event_time": t.isoformat() + "Z"}).encode())
                               for i, t in enumerate(stamps)])
    run_stream(spark, PIPELINE, tables, bootstrap, settings, out=_quiet)

    records = oracle.read_topic(bootstrap, TOPIC)
    memberships, well_formed = Counter(), 0
    for r in records:
        reason, event = oracle.classify_fields(r.value, PIPELINE.fields)
        if not reason:
            well_formed += 1
            for start in _windows_of(event["event_time"]):
                memberships[(event["key"], start)] += 1
    windowed = Counter()
    for row in _rows(tables, "windows") + _rows(tables, "window_state"):
        key = (row["key"], _naive(row["window_start"]))
        assert key not in windowed, f"window {key} both final and open"
        windowed[key] = row["events"]
        assert row["window_end"] - row["window_start"] == SIZE
        assert _naive(row["window_start"]).minute % 15 == 0 and _naive(row["window_start"]).second == 0
    late = Counter((r["key"], _naive(r["window_start"])) for r in _rows(tables, "late"))
    assert late and sum(late.values()) >= 8, "the records three hours behind were late for all their windows"
    assert {k for k in late if k[0] == "k-late"} <= set(memberships)
    assert windowed + late == memberships, "each membership counted in its window or recorded late, once"
    assert sum(memberships.values()) == well_formed * (SIZE // EVERY)
    state = {r["key"]: r["events"] for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert sum(state.values()) == well_formed, "late or not, every record counts in the keyed state"
