"""The pipeline language at full stretch: Avro records in Confluent's wire format, keyed by two fields (nested in
a record), with `first`, a standard deviation, an approximate distinct count and hopping windows, declared in a
package of its own (its `.avsc` beside it, registered by entry point): archive, backfill, handoff, a stream
SIGKILLed while more records arrive and restarted, and an offline rebase (reconciled without override, one key
counting a thousand distinct ids), against plain Python decoding the same bytes with fastavro; every record
aggregated or dead-lettered with its reason, once, and every well-formed record in each of its windows or late."""

from __future__ import annotations

import io
import json
import os
import random
import signal
import statistics
import time
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import fastavro
import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.rebase.run import rebase_pipeline
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import create_topic, produce
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.installed import install_pipeline
from tests.support.streams import start_stream, wait_until

TOPIC = "avro.orders"
SCHEMA_ID = 7
SCHEMA = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "order_id", "type": ["null", "string"], "default": None},
        {"name": "customer", "type": {"type": "record", "name": "Customer", "fields": [
            {"name": "id", "type": "string"}, {"name": "region", "type": "string"}]}},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "total", "type": ["null", "double"], "default": None},
    ],
}


PIPELINE_MODULE = """
from datetime import timedelta
from pathlib import Path

from switchyard.state_handoff.language.spec import (AvroFormat, Field, HoppingWindows, Pipeline, approx_distinct, count, first, last,
                                stddev, total)

PIPELINE = Pipeline(
    name="avro_orders", key=("region", "customer"), event_time="placed_at", event_id="order_id",
    fields=(Field("order_id", "string", required=False), Field("customer", "string", path="customer.id"),
            Field("region", "string", path="customer.region"), Field("placed_at", "timestamp"),
            Field("total", "number")),
    aggregations=(count("orders"), total("revenue", "total"), first("first_total", "total"),
                  last("last_total", "total"), stddev("total_spread", "total"),
                  approx_distinct("order_ids", "order_id")),
    windows=HoppingWindows(size=timedelta(hours=6), every=timedelta(hours=2), allowed_lateness=timedelta(minutes=30),
                           aggregations=(count("orders"), approx_distinct("order_ids", "order_id"))),
    avro=AvroFormat(schema=Path(__file__).with_name("order.avsc"), schema_id=7))
"""


def _installed(site) -> Pipeline:
    """The pipeline's package in `site` (a folder on PYTHONPATH), registered under the entry point as an installed
    package is, and its declaration as this process reads it."""
    return install_pipeline(site, "avro_orders_pipeline", "avro_orders", PIPELINE_MODULE,
                            {"order.avsc": json.dumps(SCHEMA)})


def _framed(record: dict, schema_id: int = SCHEMA_ID) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(SCHEMA), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def _records(n: int, first: int = 0) -> list[tuple[bytes, bytes | None]]:
    """Orders `first`.. `first + n` four minutes apart from 2026-01-01, a few of every malformed kind among them."""
    rng, start = random.Random(5 + first), datetime(2026, 1, 1, tzinfo=timezone.utc)
    sent = []
    for i in range(first, first + n):
        order = {"order_id": f"o{i}" if i % 9 else None,
                 "customer": {"id": f"c{rng.randrange(12)}", "region": rng.choice(["eu", "us", "apac"])},
                 "placed_at": start + timedelta(minutes=4 * i + rng.randrange(3)),
                 "total": None if i % 31 == 0 else round(rng.uniform(1, 99), 2)}
        value = _framed(order)
        if i % 53 == 5:
            value = b"\x01" + value[1:]  # not the zero magic byte
        elif i % 53 == 17:
            value = _framed(order, schema_id=8)  # another schema's id
        elif i % 53 == 29:
            value = value[:9]  # cut short
        elif i % 53 == 41:
            value = None  # a tombstone
        sent.append((order["customer"]["id"].encode(), value))
    return sent


def _one_customer(n: int) -> list[tuple[bytes, bytes]]:
    """`n` orders of one customer, each its own id, one second apart: a distinct count past the sketch's exact mode,
    whose estimate differs between one pass and a union of partial sketches (the stream's batches, a rebase's
    tiles) while the registers agree."""
    start = datetime(2026, 1, 2, 6, tzinfo=timezone.utc)
    return [(b"big", _framed({"order_id": f"big-{i}", "customer": {"id": "big", "region": "eu"},
                              "placed_at": start + timedelta(seconds=i), "total": 1.0 + i % 7}))
            for i in range(n)]


def _quiet(*_):
    pass


HLL_ERROR = 3 * 1.04 / 64  # three relative standard errors of a sketch of 2^12 registers (exact at these sizes)
EVERY = timedelta(hours=2)


def _estimate(sketch: bytes) -> float:
    """A sketch's estimate as the `datasketches` package reads Spark's binary form, no JVM."""
    import datasketches

    return datasketches.hll_sketch.deserialize(bytes(sketch)).get_estimate()


def _windows_of(t: datetime) -> list[datetime]:
    """The starts of the three windows a naive UTC instant lies in, as Delta's rows give them (aware, UTC)."""
    step = int(EVERY.total_seconds())
    pane = datetime.fromtimestamp(int(t.replace(tzinfo=timezone.utc).timestamp()) // step * step, timezone.utc)
    return [pane - k * EVERY for k in range(3)]


def _rows(tables: Tables, name: str) -> list[dict]:
    return DeltaTable(tables.path(name)).to_pyarrow_table().to_pylist()


def _rows_late_for(tables: Tables, grain) -> bool:
    return any((r["region"], r["customer"], r["window_start"]) == grain for r in _rows(tables, "late"))


@pytest.mark.timeout(1800)
def test_avro_records_through_backfill_a_killed_stream_and_rebase(spark, bootstrap, tmp_path):
    site = tmp_path / "site"
    pipeline = _installed(site)
    create_topic(bootstrap, TOPIC, partitions=2)
    produce(bootstrap, TOPIC, _records(500))
    tables = Tables(str(tmp_path / "warehouse"), pipeline.name)
    run_archive(spark, pipeline, tables, bootstrap, TOPIC, archive_cut(bootstrap, TOPIC, fraction=0.7), out=_quiet)
    run_backfill(spark, pipeline, tables, out=_quiet)
    run_handoff(spark, pipeline, tables, bootstrap)

    # `switchyard stream --pipeline avro_orders` finds the package by its entry point; killed while it reads more
    env = {"PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    log = tmp_path / "stream.log"
    process = start_stream(tables, bootstrap, log, env=env)
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, process, log, "CAUGHT_UP",
                   timeout=600)
        produce(bootstrap, TOPIC, _records(200, first=500) + _one_customer(1000))
        time.sleep(2)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
    again = start_stream(tables, bootstrap, log, "--until-caught-up", env=env)
    assert again.wait(timeout=900) == 0, log.read_text()[-3000:]

    records = oracle.read_topic(bootstrap, TOPIC)
    assert len(records) == 1700
    groups, reasons = defaultdict(list), Counter()
    for r in records:
        reason, event = oracle.classify_avro(r.value, pipeline.fields, pipeline.avro)
        if reason:
            reasons[reason] += 1
        else:
            groups[(event["region"], event["customer"])].append(event)
    assert set(reasons) == {"not_confluent_avro", "unknown_schema_id_8", "bad_avro", "tombstone", "bad_total"}

    def order(e):
        return e["placed_at"], (0, "") if e["order_id"] is None else (1, e["order_id"]), e["total"]

    state = {(r["region"], r["customer"]): r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert set(state) == set(groups)
    for k, events in groups.items():
        row = state[k]
        assert row["orders"] == len(events) and row["revenue"] == pytest.approx(sum(e["total"] for e in events))
        assert (row["first_total"], row["last_total"]) == (min(events, key=order)["total"],
                                                           max(events, key=order)["total"]), k
        totals = [e["total"] for e in events]
        m2 = row["total_spread__m2"] / (row["total_spread__count"] - 1) if len(totals) > 1 else None
        assert m2 == (pytest.approx(statistics.variance(totals), rel=1e-9) if m2 is not None else None), k
        ids = {e["order_id"] for e in events if e["order_id"] is not None}
        assert _estimate(row["order_ids"]) == pytest.approx(len(ids), rel=HLL_ERROR), k
    assert any(e["order_id"] is None for es in groups.values() for e in es), "NULL ids are not counted"

    # each well-formed record in each of its three windows (final or open) or recorded late for it, once
    memberships, ids_in = Counter(), defaultdict(set)
    for (region, customer), events in groups.items():
        for e in events:
            for start in _windows_of(e["placed_at"]):
                memberships[(region, customer, start)] += 1
                if e["order_id"] is not None:
                    ids_in[(region, customer, start)].add(e["order_id"])
    windowed = Counter()
    for row in _rows(tables, "windows") + _rows(tables, "window_state"):
        grain = (row["region"], row["customer"], row["window_start"])
        assert grain not in windowed, f"window {grain} both final and open"
        windowed[grain] = row["orders"]
        if not _rows_late_for(tables, grain):
            assert _estimate(row["order_ids"]) == pytest.approx(len(ids_in[grain]), rel=HLL_ERROR), grain
    late = Counter((r["region"], r["customer"], r["window_start"]) for r in _rows(tables, "late"))
    assert windowed + late == memberships
    dead = Counter(r["reason"] for r in DeltaTable(tables.dead_letter).to_pyarrow_table().to_pylist())
    assert dead == reasons, "each malformed record dead-lettered once, with the oracle's reason"
    assert sum(len(es) for es in groups.values()) + sum(dead.values()) == len(records)

    new = rebase_pipeline(pipeline, tables, bootstrap, "rebase", "test", lambda: spark, out=_quiet)
    committed = handoff_log.details(handoff_log.latest(tables, Status.HANDOFF_COMMITTED,
                                                       handoff_id=new.handoff_id))
    assert committed["reconciliation"]["keys_different"] == 0, committed["reconciliation"]
