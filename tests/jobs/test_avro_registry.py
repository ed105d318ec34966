"""Avro records decoded by the writer schema their id names, from a real schema registry (Apicurio Registry's
Confluent API, tests/support/registry.py): a pipeline reads the versions of its subject into its own schema.

Records under v1 (without the `currency` the pipeline keys by: its default fills it) and a compatible v2 both
aggregate through archive, backfill and handoff; a version the pipeline's schema cannot read, an id of another
subject and an id nobody registered are dead-lettered naming their id. Then, while the stream runs, a v3 is
registered and written at once: the stream meets the new id, reads the subject again and starts its queries again
from their checkpoints (no FAILED), so every v3 record is aggregated; an unregistered id a little above every known
one is looked for the same way and then dead-lettered, one far above dead-lettered at once. Everything against fastavro decoding the same bytes, with every record aggregated or dead-lettered
once."""

from __future__ import annotations

import io
import json
import os
import signal
from collections import Counter, defaultdict
from datetime import datetime, timedelta, timezone

import fastavro
import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import create_topic, produce
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.installed import install_pipeline
from tests.support.registry import call, register
from tests.support.streams import start_stream, wait_until

TOPIC = "registry.payments"
SUBJECT = f"{TOPIC}-value"
_CUSTOMER = {"name": "customer", "type": "string"}
_AMOUNT = {"name": "amount", "type": "double"}
_PAID_AT = {"name": "paid_at", "type": {"type": "long", "logicalType": "timestamp-millis"}}
_CURRENCY = {"name": "currency", "type": "string", "default": "EUR"}
READER = {"type": "record", "name": "Payment", "namespace": "shop",
          "fields": [{"name": "payment_id", "type": "string"}, _CUSTOMER, _AMOUNT, _PAID_AT, _CURRENCY]}
V1 = {**READER, "fields": [{"name": "payment_id", "type": "string"}, _CUSTOMER, _AMOUNT, _PAID_AT]}
V2 = {**READER, "fields": [*READER["fields"], {"name": "note", "type": ["null", "string"], "default": None}]}
V3 = {**READER, "fields": [*V2["fields"], {"name": "channel", "type": "string", "default": "web"}]}
TEXT_AMOUNT = {**READER, "fields": [{"name": "payment_id", "type": "string"}, _CUSTOMER,
                                    {"name": "amount", "type": "string"}, _PAID_AT]}
OTHER = {"type": "record", "name": "Refund", "fields": [{"name": "refund_id", "type": "string"}]}
NOBODY, NOBODY_ABOVE = 999_999, 888_888  # ids never registered: met by the batch or the stream, then by the stream
FAR = 1 << 30  # an id far above any a registration gives: dead-lettered with no look

PIPELINE_MODULE = """
from pathlib import Path

from switchyard.state_handoff.language.spec import AvroFormat, Field, Pipeline, count, total

PIPELINE = Pipeline(
    name="registry_payments", key=("customer", "currency"), event_time="paid_at", event_id="payment_id",
    fields=(Field("payment_id", "string"), Field("customer", "string"), Field("amount", "number"),
            Field("paid_at", "timestamp"), Field("currency", "string")),
    aggregations=(count("payments"), total("paid", "amount")),
    avro=AvroFormat(schema=Path(__file__).with_name("payment.avsc"), subject="registry.payments-value"))
"""


def _installed(site):
    return install_pipeline(site, "registry_payments_pipeline", "registry_payments", PIPELINE_MODULE,
                            {"payment.avsc": json.dumps(READER)})


def _framed(schema: dict, schema_id: int, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return b"\x00" + schema_id.to_bytes(4, "big") + out.getvalue()


def _payments(first: int, n: int, written: list[tuple[dict, int]]) -> list[tuple[bytes, bytes]]:
    """Payments `first`.. `first + n`, a minute apart, the i-th under `written[i % len(written)]`'s schema and id."""
    start = datetime(2026, 3, 1, tzinfo=timezone.utc)
    sent = []
    for i in range(first, first + n):
        schema, schema_id = written[i % len(written)]
        record = {"payment_id": f"p{i}", "customer": f"c{i % 7}", "paid_at": start + timedelta(minutes=i),
                  "amount": f"{i % 50}.5" if schema is TEXT_AMOUNT else float(i % 50) + 0.25,
                  "currency": ["EUR", "USD"][i % 2], "note": None, "channel": "app", "refund_id": f"r{i}"}
        sent.append((record["customer"].encode(), _framed(schema, schema_id, record)))
    return sent


def _quiet(*_):
    pass


@pytest.mark.timeout(1200)
def test_records_decode_by_the_writer_schema_their_id_names(spark, bootstrap, registry, tmp_path, monkeypatch):
    _, base = registry
    ids = {}
    for name, schema in (("v1", V1), ("v2", V2), ("text_amount", TEXT_AMOUNT)):
        status, answer = register(base, SUBJECT, schema)
        assert status == 200, answer
        ids[name] = answer["id"]
    status, answer = register(base, "registry.refunds-value", OTHER)
    assert status == 200, answer
    ids["other"] = answer["id"]
    env = {"SWITCHYARD_SCHEMA_REGISTRY_URL": base}
    monkeypatch.setenv("SWITCHYARD_SCHEMA_REGISTRY_URL", base)  # this process's jobs; the stream is handed `env`

    site = tmp_path / "site"
    pipeline = _installed(site)
    create_topic(bootstrap, TOPIC, partitions=2)
    produce(bootstrap, TOPIC, _payments(0, 240, [(V1, ids["v1"]), (V2, ids["v2"]), (V1, ids["v1"]),
                                                 (TEXT_AMOUNT, ids["text_amount"]), (V2, ids["v2"]),
                                                 (OTHER, ids["other"]), (V2, ids["v2"]), (V1, NOBODY)]))
    tables = Tables(str(tmp_path / "warehouse"), pipeline.name)
    run_archive(spark, pipeline, tables, bootstrap, TOPIC, archive_cut(bootstrap, TOPIC, fraction=0.7), out=_quiet)
    run_backfill(spark, pipeline, tables, out=_quiet)
    run_handoff(spark, pipeline, tables, bootstrap)

    log = tmp_path / "stream.log"
    process = start_stream(tables, bootstrap, log, env={"PYTHONPATH": f"{site}{os.pathsep}"
                                                                      f"{os.environ.get('PYTHONPATH', '')}", **env})
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, process, log, "CAUGHT_UP",
                   timeout=600)
        status, answer = register(base, SUBJECT, V3)  # a producer registers its new version, then writes with it
        assert status == 200, answer
        ids["v3"] = answer["id"]
        produce(bootstrap, TOPIC, _payments(240, 60, [(V3, ids["v3"]), (V1, ids["v1"]), (V3, ids["v3"])]))
        produce(bootstrap, TOPIC, _payments(300, 4, [(V3, NOBODY_ABOVE), (V1, FAR)]))

        writers = {ids[v]: s for v, s in (("v1", V1), ("v2", V2), ("v3", V3))}
        records = oracle.read_topic(bootstrap, TOPIC)
        assert len(records) == 304
        groups, reasons = defaultdict(list), Counter()
        for r in records:
            reason, event = oracle.classify_avro(r.value, pipeline.fields, pipeline.avro, writers,
                                                 incompatible=frozenset({ids["text_amount"]}))
            if reason:
                reasons[reason] += 1
            else:
                groups[(event["customer"], event["currency"])].append(event)
        assert set(reasons) == {f"incompatible_schema_id_{ids['text_amount']}", f"unknown_schema_id_{ids['other']}",
                                f"unknown_schema_id_{NOBODY}", f"unknown_schema_id_{NOBODY_ABOVE}",
                                f"unknown_schema_id_{FAR}"}
        assert {c for _, c in groups} == {"EUR", "USD"} and any(e["payment_id"] == "p0" for es in groups.values()
                                                               for e in es), "v1's records read with the default"

        def dead() -> Counter:
            return Counter(r["reason"] for r in DeltaTable(tables.dead_letter).to_pyarrow_table().to_pylist())

        def state() -> dict:
            return {(r["customer"], r["currency"]): r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}

        wait_until(lambda: dead() == reasons and sum(r["payments"] for r in state().values()) == sum(
            len(es) for es in groups.values()), process, log, "every record aggregated or dead-lettered", timeout=600)
    finally:
        os.kill(process.pid, signal.SIGTERM)  # the stream alone: it stops its JVM itself
        assert process.wait(timeout=120) == 0, log.read_text()[-3000:]

    final = state()
    assert set(final) == set(groups)
    for key, events in groups.items():
        assert final[key]["payments"] == len(events), key
        assert final[key]["paid"] == pytest.approx(sum(e["amount"] for e in events)), key
    assert sum(len(es) for es in groups.values()) + sum(dead().values()) == len(records)
    statuses = [e.status for e in handoff_log.entries(tables)]
    assert Status.FAILED not in statuses, log.read_text()[-3000:]
    assert statuses.count(Status.STREAM_STARTED) >= 2, "the queries started again for the new version"
    assert f"Avro schema id {ids['v3']}" in log.read_text()
    assert call("GET", f"{base}/subjects/{SUBJECT}/versions")[1] == [1, 2, 3, 4]
