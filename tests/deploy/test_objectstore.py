"""The warehouse on an S3-compatible object store (S3Proxy from Maven Central): the storage layer, delta-rs'
compare-and-swap commits, and the whole switch through the `switchyard` command line against the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.details import BackfillStarted
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import delta_cas, storage
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.streams import (QUIET, assert_matches_oracle, latest_total, start_stream, stop_stream, stream_read,
                                   tail_events, wait_until)

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]


def _switchyard(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"}
    result = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *args], capture_output=True, text=True, cwd=ROOT,
                            env=env, timeout=timeout)
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    return result


def _no_local_s3a_folder(*folders: Path) -> None:
    """A path written with open() or pathlib instead of the storage layer lands in `./s3a:/...`."""
    for folder in folders:
        assert not [name for name in os.listdir(folder) if name.startswith("s3a:")], f"a folder named s3a: in {folder}"


def test_control_files_round_trip_on_the_store(objectstore):  # noqa: F811
    root = storage.Uri(objectstore.warehouse())
    assert storage.list_dir(root) == [] and not storage.exists(root / "progress.json")
    with pytest.raises(FileNotFoundError):
        storage.read_text(root / "progress.json")
    storage.write_text_atomic(root / "a" / "progress.json", json.dumps({"batch_id": 1}))
    storage.write_text_atomic(root / "a" / "progress.json", json.dumps({"batch_id": 2}))
    assert json.loads(storage.read_text(root / "a" / "progress.json")) == {"batch_id": 2}
    assert storage.list_dir(root) == ["a"] and storage.is_dir(root / "a")
    storage.delete(root / "a" / "progress.json")
    storage.delete(root / "a" / "progress.json")  # gone already: nothing to do
    assert not storage.exists(root / "a" / "progress.json")


def test_a_commit_at_a_version_another_writer_took_is_refused(objectstore):  # noqa: F811
    """The compare-and-swap of state_handoff/io/delta_cas.py on the store: the commit file is put with
    If-None-Match: *, so a writer that read version 0 cannot overwrite the version 1 another writer made."""
    uri = f"{objectstore.warehouse()}/cas"
    schema = pa.schema([("writer", pa.string())])
    stale = delta_cas.open_or_create(uri, schema, name="cas", description="compare-and-swap probe")
    fresh = delta_cas.open_or_create(uri, schema, name="cas", description="compare-and-swap probe")
    assert stale.version() == fresh.version() == 0
    assert delta_cas.commit_next(fresh, pa.table({"writer": ["fresh"]}, schema))
    assert not delta_cas.commit_next(stale, pa.table({"writer": ["stale"]}, schema))
    reread = delta_cas.open_or_create(uri, schema, name="cas", description="compare-and-swap probe")
    assert reread.version() == 1 and reread.to_pyarrow_table().column("writer").to_pylist() == ["fresh"]


def test_the_handoff_log_compacts_itself_on_the_store(objectstore, monkeypatch):  # noqa: F811
    """delta-rs's optimize and vacuum on the store: the log's row files compacted, every entry kept in order."""
    monkeypatch.setattr(handoff_log, "COMPACT_FILES", 5)
    tables = Tables(objectstore.warehouse(), "demo")
    written = [handoff_log.append(tables, f"h{i}", Status.BACKFILL_STARTED, details=BackfillStarted(strategy=str(i)))
               for i in range(12)]
    table = DeltaTable(tables.handoffs, storage_options=storage.delta_options(tables.handoffs))
    assert len(table.file_uris()) < 5, table.file_uris()
    assert any(h.get("operation") == "OPTIMIZE" for h in table.history())
    assert [vars(e) for e in handoff_log.entries(tables)] == [vars(w) for w in written]


def test_the_format_is_recorded_and_another_refused_on_the_store(objectstore):  # noqa: F811
    """state_handoff/format.py on the store: a pipeline's first log records the format, read back by a fresh
    process; a log that records none is refused in one line."""
    current = Tables(objectstore.warehouse(), "demo")
    handoff_log.append(current, "h1", Status.BACKFILL_STARTED)
    elsewhere = subprocess.run(
        [sys.executable, "-c", "from switchyard.state_handoff.control import handoff_log\n"
         "from switchyard.state_handoff.tables import Tables\n"
         f"print(len(handoff_log.entries(Tables({current.warehouse!r}, 'demo'))))"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (elsewhere.returncode, elsewhere.stdout) == (0, "1\n"), elsewhere.stderr[-2000:]

    warehouse = objectstore.warehouse()
    log = storage.join(warehouse, "demo", "handoffs")  # as a switchyard that records no format left it
    delta_cas.open_or_create(log, handoff_log.SCHEMA, name="handoffs", description="a log of format 0")
    result = _switchyard("status", "--pipeline", "demo", "--warehouse", warehouse)
    assert result.returncode == 2 and result.stderr == (
        f"switchyard status: error: pipeline demo of warehouse {warehouse} holds switchyard format 0 (this "
        "switchyard reads format 1): archive and backfill it again into a new --warehouse\n"), result.stderr


@pytest.mark.extended  # test_scale_out runs the same switch on this store, on a cluster
@pytest.mark.timeout(2400)  # four JVMs (archive, backfill, handoff, stream), each doing many small S3 requests
def test_the_switch_on_the_object_store_matches_the_oracle(s3a_spark, objectstore, bootstrap, topic_name,  # noqa: F811
                                                          tmp_path):
    warehouse = objectstore.warehouse()
    common = ["--pipeline", PIPELINE.name, "--warehouse", warehouse, "--bootstrap", bootstrap]
    run_generate(bootstrap, topic_name, events=1200, keys=20, partitions=2, days=2, seed=5, malformed_rate=0.03,
                 out=QUIET)
    for step in (["archive", *common, "--topic", topic_name, "--fraction", "0.8"], ["backfill", *common],
                 ["handoff", *common]):
        result = _switchyard(*step)
        assert result.returncode == 0, result.stderr[-3000:]
    tables = Tables(warehouse, PIPELINE.name)
    handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    assert storage.exists(storage.join(tables.archive, "_archive.json"))

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, "--tables-trigger-seconds", "1")
    try:
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 150, seed=7))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff))
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read", timeout=600)
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, proc, log,
                   what="CAUGHT_UP", timeout=600)
    finally:
        stop_stream(proc, log)

    statuses = [e.status for e in handoff_log.entries(tables)]
    assert statuses[:5] == ["BACKFILL_STARTED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED", "STREAM_STARTED",
                            "SWITCHED"] and statuses[-1] == "STOPPED"
    checkpoint = storage.join(tables.stream_dir, handoff.handoff_id, "checkpoints", "keyed")
    assert "0" in storage.list_dir(storage.join(checkpoint, "commits"))
    assert_matches_oracle(s3a_spark, bootstrap, topic_name, tables)

    status = _switchyard("status", *common, "--json")
    assert status.returncode == 0, status.stderr
    figures = json.loads(status.stdout)
    assert figures["phase"] == "stopped" and figures["handoff_id"] == handoff.handoff_id
    assert figures["late"] >= 12 and figures["dead_lettered"] > 0
    _no_local_s3a_folder(ROOT, tmp_path)


PROFILE_RUN = """\
import sys
from switchyard.jobs.cli.parser import main
common = ["--pipeline", "demo", "--warehouse", sys.argv[1], "--bootstrap", sys.argv[2]]
for step in (["archive", "--topic", sys.argv[3], "--fraction", "1.0"], ["backfill"], ["handoff"], ["status", "--json"]):
    code = main([*step, *common])
    if code:
        sys.exit(code)
"""


def test_with_no_keys_in_the_environment_the_default_chain_reads_a_profile(objectstore, bootstrap,  # noqa: F811
                                                                          topic_name, tmp_path):
    """AWS_PROFILE and a shared credentials file, no AWS_ACCESS_KEY_ID or AWS_SECRET_ACCESS_KEY: archive, backfill,
    handoff and status on the store (Spark's S3A, delta-rs and pyarrow alike, in one process), and the state equals
    the oracle's."""
    from switchyard.state_handoff.io.storage import delta_options
    from tests.support import oracle

    aws = tmp_path / "aws"
    aws.mkdir()
    key, secret = objectstore.credentials
    (aws / "credentials").write_text(f"[team]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n")
    (aws / "config").write_text("[profile team]\n")
    env = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                                                            "AWS_SESSION_TOKEN")}
    env.update(AWS_PROFILE="team", AWS_SHARED_CREDENTIALS_FILE=str(aws / "credentials"),
               AWS_CONFIG_FILE=str(aws / "config"), SWITCHYARD_SPARK_PROFILE="test")
    run_generate(bootstrap, topic_name, events=400, keys=10, partitions=2, days=1, seed=9, malformed_rate=0.0,
                 out=QUIET)
    warehouse = objectstore.warehouse()
    done = subprocess.run([sys.executable, "-c", PROFILE_RUN, warehouse, bootstrap, topic_name], capture_output=True,
                          text=True, cwd=tmp_path, env=env, timeout=900)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stdout[-2000:] + done.stderr[-3000:]
    status = json.loads(done.stdout[done.stdout.index("{\n"):])
    assert status["phase"] == "switching" and status["handoff_id"]

    expected = oracle.backlog(oracle.read_topic(bootstrap, topic_name))  # read back with the fixture's keys
    state = DeltaTable(Tables(warehouse, PIPELINE.name).state,
                       storage_options=delta_options(warehouse)).to_pyarrow_table().to_pylist()
    assert {r["key"]: r["event_count"] for r in state} == {k: s.event_count for k, s in expected.state.items()}
    _no_local_s3a_folder(tmp_path)
