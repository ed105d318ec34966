"""The `switchyard stream` command line every launcher builds (jobs/stream/command.py): the pipeline by the reference
it was given, flags in order, nothing secret on it; and `switchyard serve --pipeline module:NAME` hands its child
that same reference, which the child resolves (no JVM: the child refuses a bad flag once it has found the
pipeline)."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from switchyard.jobs.stream.command import stream_command
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.pipelines.demo import PIPELINE
from switchyard.state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[2]
ORDERS = dataclasses.replace(PIPELINE, name="orders_object")  # held by no registry: found only as module:NAME


def test_the_pipeline_goes_as_given_then_the_warehouse_kafka_and_the_launchers_flags(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert stream_command(f"{__name__}:ORDERS", "wh", "127.0.0.1:9092", log_format="text",
                          extra_args=["--tables-trigger-seconds", "1"]) == [
        sys.executable, "-m", "switchyard.jobs.cli", "--log-format", "text", "stream",
        "--pipeline", f"{__name__}:ORDERS", "--warehouse", str(tmp_path / "wh"), "--bootstrap", "127.0.0.1:9092",
        "--tables-trigger-seconds", "1"]
    assert stream_command("demo", "s3a://bucket/prefix", "b:1")[3:] == [
        "stream", "--pipeline", "demo", "--warehouse", "s3a://bucket/prefix", "--bootstrap", "b:1"]


def test_a_warehouse_uri_holding_credentials_is_refused_without_showing_them():
    with pytest.raises(UserError) as refused:
        stream_command("demo", "s3a://AKIAKEY:s3cr3t@bucket/prefix", "b:1")
    message = str(refused.value)
    assert message.startswith("--warehouse s3a://bucket/prefix holds credentials in its URI")
    assert "AKIAKEY" not in message and "s3cr3t" not in message and "\n" not in message


def test_serve_hands_a_module_reference_to_its_stream_as_given(tmp_path):
    tables = Tables(str(tmp_path / "wh"), ORDERS.name)
    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED):  # a handoff: serve starts the stream
        handoff_log.append(tables, "h1", status)
    log = tmp_path / "serve.log"
    service = subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "serve", "--pipeline", f"{__name__}:ORDERS",
         "--metrics-port", "0", "--stream-arg=--metrics-port", "--stream-arg=70000",
         "--warehouse", tables.warehouse, "--bootstrap", "127.0.0.1:9"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 120
        while "held down" not in log.read_text():
            assert service.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=60) == 0, log.read_text()[-3000:]
    out = log.read_text()
    assert "unknown pipeline" not in out, out[-3000:]
    # the child found the pipeline, then refused its flag: the refusal that comes after the pipeline is resolved
    assert "serve orders_object: the stream refused (exit 2), held down: " in out, out[-3000:]
    assert "--metrics-port must be a port from 0 (any free one) to 65535, not 70000" in out, out[-3000:]
