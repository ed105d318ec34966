"""When a stream's failed query is started again in the same process (jobs/stream/query_restarts.py): a record of an Avro
schema id met before and found absent is a failure, logged as FAILED, not a restart; an error of another kind is
left to the caller. Spark-free: the supervisor is a plain object with the fields the decision reads."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from switchyard.jobs.stream.options import StreamFailed
from switchyard.jobs.stream.query_restarts import may_start_again
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.language import avro_writers
from switchyard.state_handoff.language.spec import AvroFormat
from switchyard.state_handoff.tables import Tables


def test_an_id_met_again_after_it_was_found_absent_fails_with_failed_logged(tmp_path, monkeypatch):
    schema = tmp_path / "order.avsc"
    schema.write_text(json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}))
    avro = AvroFormat(schema=schema, subject="restarts-test-value")
    monkeypatch.setitem(avro_writers._ABSENT, avro.subject, {42: time.monotonic()})  # looked for, not a version
    tables = Tables(str(tmp_path / "wh"), "orders")
    said = []
    sup = SimpleNamespace(pipeline=SimpleNamespace(name="orders", avro=avro), out=said.append, checkpoint_races=0,
                          log=lambda handoff_id, status, **fields: handoff_log.append(tables, handoff_id, status,
                                                                                      **fields))
    handoff = SimpleNamespace(handoff_id="h1")
    met = StreamFailed(f"query orders-keyed read a record of Avro schema id 42 ({avro_writers.UNSEEN} 42)")
    assert may_start_again(sup, handoff, met) is False and said == []
    failed = handoff_log.latest(tables, Status.FAILED)
    assert failed is not None and "schema id 42" in details.of(failed).reason
    assert may_start_again(sup, handoff, StreamFailed("query orders-keyed failed: boom")) is False
    assert len(handoff_log.entries(tables)) == 1, "another error's FAILED is the monitor's, not written here"


def test_an_id_found_absent_is_looked_for_again_once_the_finding_expires(monkeypatch):
    """A version registered after its id was found absent is read by a plan built once the finding has expired,
    instead of its records being dead-lettered for the process's life."""
    monkeypatch.setitem(avro_writers._ABSENT, "expiring-value", {
        42: time.monotonic() - avro_writers.ABSENT_FOR_S - 1, 43: time.monotonic()})
    assert set(avro_writers._absent("expiring-value")) == {43}
