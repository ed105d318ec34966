"""Avro schema resolution checked before decoding (state_handoff/language/avro_resolution.py): which writer schemas a reader
schema takes, and the reason named for one it does not; each case also decoded by fastavro, whose resolution is the
specification's, so the check and a real reader agree."""

from __future__ import annotations

import io

import fastavro
import pytest

from switchyard.state_handoff.language.avro_resolution import incompatibility

ADDRESS = {"type": "record", "name": "Address", "fields": [{"name": "city", "type": "string"}]}
READER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "currency", "type": "string", "default": "EUR"},
    {"name": "ship_to", "type": ["null", ADDRESS], "default": None},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
]}


def _writer(*fields, name="Order") -> dict:
    return {"type": "record", "name": name, "namespace": "shop", "fields": list(fields)}


ID = {"name": "id", "type": "string"}
COMPATIBLE = {
    "fewer fields, defaults fill them": _writer(ID, {"name": "amount", "type": "double"}),
    "an int amount promoted": _writer(ID, {"name": "amount", "type": "int"}),
    "a long amount promoted": _writer(ID, {"name": "amount", "type": "long"}),
    "an extra field skipped": _writer(ID, {"name": "amount", "type": "float"}, {"name": "note", "type": "string"}),
    "a nested record and an array": _writer(ID, {"name": "amount", "type": "double"},
                                            {"name": "ship_to", "type": ADDRESS},
                                            {"name": "tags", "type": {"type": "array", "items": "string"}}),
    "bytes read as a string": _writer({"name": "id", "type": "bytes"}, {"name": "amount", "type": "double"}),
}
INCOMPATIBLE = {
    "a string amount": (_writer(ID, {"name": "amount", "type": "string"}), "Order.amount"),
    "no amount and no default": (_writer(ID), "Order.amount: the writer has no such field"),
    "a double id": (_writer({"name": "id", "type": "double"}, {"name": "amount", "type": "double"}), "Order.id"),
    "a nullable amount into a double": (_writer(ID, {"name": "amount", "type": ["null", "double"]}), "Order.amount"),
    "another record's name": (_writer(ID, {"name": "amount", "type": "double"}, name="Refund"), "Refund"),
    "an array of ints as strings": (_writer(ID, {"name": "amount", "type": "double"},
                                            {"name": "tags", "type": {"type": "array", "items": "int"}}),
                                    "Order.tags[]"),
}


def _example(writer: dict) -> dict:
    values = {"string": "x", "bytes": b"x", "double": 1.5, "float": 1.5, "int": 2, "long": 3}
    record = {}
    for f in writer["fields"]:
        kind = f["type"]
        if isinstance(kind, list):
            kind = kind[-1]
        if isinstance(kind, dict) and kind.get("type") == "record":
            record[f["name"]] = {"city": "Oslo"}
        elif isinstance(kind, dict) and kind.get("type") == "array":
            record[f["name"]] = [values[kind["items"]]]
        else:
            record[f["name"]] = values[kind]
    return record


def _fastavro_reads(writer: dict, reader: dict) -> bool:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(writer), _example(writer))
    try:
        fastavro.schemaless_reader(io.BytesIO(out.getvalue()), fastavro.parse_schema(writer),
                                   fastavro.parse_schema(reader))
    except Exception:  # noqa: BLE001 - any resolution failure
        return False
    return True


@pytest.mark.parametrize("case", sorted(COMPATIBLE))
def test_a_compatible_writer_schema_is_taken(case):
    assert incompatibility(COMPATIBLE[case], READER) is None
    assert _fastavro_reads(COMPATIBLE[case], READER)


@pytest.mark.parametrize("case", sorted(INCOMPATIBLE))
def test_an_incompatible_writer_schema_is_named_with_where(case):
    writer, where = INCOMPATIBLE[case]
    reason = incompatibility(writer, READER)
    assert reason is not None and where in reason, reason
    if case != "a nullable amount into a double":  # refused for its null branch, which this example does not write
        assert not _fastavro_reads(writer, READER)
