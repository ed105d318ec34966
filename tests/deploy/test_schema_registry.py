"""The local schema registry (deploy/schema_registry.py): Apicurio Registry built from Maven Central into the
project's home, started on a free 127.0.0.1 port, Avro schemas registered and read back through its
Confluent-compatible API, then stopped."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.registry import call, register

SUBJECT = "orders-value"
V1 = {"type": "record", "name": "Order", "namespace": "switchyard",
      "fields": [{"name": "id", "type": "string"}, {"name": "amount", "type": "double"}]}
V2 = {**V1, "fields": [*V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
INCOMPATIBLE = {**V1, "fields": [{"name": "id", "type": "int"}]}


def _register(base: str, schema: dict) -> tuple[int, dict]:
    return register(base, SUBJECT, schema)


def test_two_versions_of_a_subject_are_registered_and_read_back_by_id(registry):
    _, base = registry
    assert call("PUT", f"{base}/config/{SUBJECT}", {"compatibility": "BACKWARD"}) == (200, {"compatibility": "BACKWARD"})
    status, first = _register(base, V1)
    assert status == 200 and isinstance(first["id"], int)
    assert call("POST", f"{base}/compatibility/subjects/{SUBJECT}/versions/latest", {"schema": json.dumps(V2)})[1][
        "is_compatible"] is True
    status, second = _register(base, V2)
    assert status == 200 and second["id"] != first["id"]
    assert _register(base, V1) == (200, first)  # the same schema again: its id, no new version
    assert call("GET", f"{base}/subjects/{SUBJECT}/versions") == (200, [1, 2])
    for schema, registered in ((V1, first), (V2, second)):
        status, found = call("GET", f"{base}/schemas/ids/{registered['id']}")
        assert status == 200 and json.loads(found["schema"]) == schema
    status, latest = call("GET", f"{base}/subjects/{SUBJECT}/versions/latest")
    assert (latest["id"], latest["version"], json.loads(latest["schema"])) == (second["id"], 2, V2)
    status, subjects = call("GET", f"{base}/subjects")  # the session's registry: other tests' subjects beside
    assert status == 200 and SUBJECT in subjects


def test_an_incompatible_version_is_refused_and_an_unknown_id_is_not_found(registry):
    _, base = registry
    assert _register(base, INCOMPATIBLE)[0] == 409
    assert call("GET", f"{base}/schemas/ids/99999")[0] == 404


def _listening_addresses(pid: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp* writes them) of the TCP sockets `pid` listens on."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        target = os.readlink(f"/proc/{pid}/fd/{fd}") if os.path.islink(f"/proc/{pid}/fd/{fd}") else ""
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addresses = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                addresses.add(fields[1].split(":")[0])
    return addresses


def test_it_listens_on_loopback_only(registry):
    proc, _ = registry
    addresses = _listening_addresses(proc.pid)
    loopback = {"0100007F", "0000000000000000FFFF00000100007F"}  # 127.0.0.1, and as IPv4-mapped IPv6
    assert addresses and addresses <= loopback, addresses


def test_a_subject_deleted_after_its_versions_were_read_is_refused_and_credentials_stay_out_of_errors(registry,
                                                                                                      monkeypatch):
    """A subject this process read versions of that then answers 404 was hard-deleted: refused in one line, where a
    warning would have let every record be dead-lettered; a subject never read yet is only warned of. A registry URL
    with credentials in it is named without them."""
    import pytest

    from switchyard.state_handoff.errors import NotNow, UserError
    from switchyard.state_handoff.io import avro_registry

    _, base = registry
    subject = "deleted-value"
    monkeypatch.setenv("SWITCHYARD_SCHEMA_REGISTRY_URL", base)
    assert avro_registry.subject_versions(subject) == [], "never registered: warned of, nothing to read"
    assert register(base, subject, V1)[0] == 200
    assert [v.version for v in avro_registry.subject_versions(subject)] == [1]
    assert call("DELETE", f"{base}/subjects/{subject}")[0] == 200
    assert call("DELETE", f"{base}/subjects/{subject}?permanent=true")[0] == 200
    with pytest.raises(UserError, match=f"no longer has subject '{subject}', which had 1 version"):
        avro_registry.subject_versions(subject)
    monkeypatch.setenv("SWITCHYARD_SCHEMA_REGISTRY_URL", "http://reader:pa55word@127.0.0.1:9")
    with pytest.raises(NotNow) as unreachable:
        avro_registry.subject_versions(subject)
    assert "pa55word" not in str(unreachable.value) and "127.0.0.1:9" in str(unreachable.value)
