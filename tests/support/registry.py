"""A real schema registry (deploy/schema_registry.py: Apicurio Registry, built from Maven Central) on a free
127.0.0.1 port, started once for the session's tests that ask for it and stopped after them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from switchyard.deploy import local_server, schema_registry

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"


@pytest.fixture(scope="session")
def registry():
    """(the registry's process, the base URL of its Confluent-compatible API)."""
    home = schema_registry.default_home()
    schema_registry.build(home)
    port = schema_registry.free_port()
    proc = schema_registry.start(home, port)
    yield proc, schema_registry.url(port)
    schema_registry.stop(proc)
    assert proc.poll() is not None and local_server.port_free(port)


def call(method: str, url: str, body: dict | None = None) -> tuple[int, dict | list]:
    """One request to the registry's API: (HTTP status, the JSON it answered)."""
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": CONTENT_TYPE})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


def register(base: str, subject: str, schema: dict) -> tuple[int, dict]:
    return call("POST", f"{base}/subjects/{subject}/versions", {"schema": json.dumps(schema)})
