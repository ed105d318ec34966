"""Retention: what a live handoff still needs outlives every vacuum, with Delta's retention check on, and nothing
longer."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import details, handoff_log, kept_versions
from switchyard.state_handoff.control.handoffs import current_handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import delta_upkeep
from switchyard.state_handoff.io.kafka_io import admin_client, produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows
from tests.support.streams import QUIET, assert_matches_oracle, batch_ends, stream_until_caught_up, tail_events

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]


def _quiet(*_):
    pass


def _on_disk(path: str) -> set[str]:
    return {os.path.relpath(os.path.join(root, name), path) for root, _, names in os.walk(path)
            if "_delta_log" not in root for name in names if name.endswith(".parquet")}


def _files(table: DeltaTable) -> set[str]:
    root = table.table_uri.removeprefix("file://")
    return {os.path.relpath(uri.removeprefix("file://"), root) for uri in table.file_uris()}


def _handed_off(spark, bootstrap, topic, tmp_path, events, keys, partitions, days, seed, fraction):
    """Generated events, `fraction` of each partition archived, backfilled and handed off: the tables and handoff."""
    run_generate(bootstrap, topic, events=events, keys=keys, partitions=partitions, days=days, seed=seed,
                 malformed_rate=0.03, out=QUIET)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=fraction),
                out=_quiet)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    return tables, run_handoff(spark, PIPELINE, tables, bootstrap)


def test_vacuum_keeps_the_handoffs_state_version_until_its_stream_switched(spark, bootstrap, topic_name, tmp_path,
                                                                           monkeypatch):
    """Until its stream has SWITCHED, the state version a handoff recorded is kept past every vacuum (the seed's
    fallback, the state at that version, is read when the seed's files are missing). Once SWITCHED the seed is in
    the stream's checkpoint and the version is released: the stream's tidies (after every batch an hour on;
    retention 0 here) delete everything the MERGEs replaced, that version's files too, and a restart resumes from
    the checkpoint exactly; the table's own retention, not a disabled check, decides what is old."""
    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 0)
    monkeypatch.setenv(delta_upkeep.EVERY_ENV, "1")
    tables, handoff = _handed_off(spark, bootstrap, topic_name, tmp_path, events=2400, keys=30, partitions=3, days=2,
                                  seed=11, fraction=0.8)
    assert kept_versions.kept_state_versions(PipelineView.read(tables)) == [handoff.state_version], "not switched yet: kept"
    handed = _files(DeltaTable(tables.state, version=handoff.state_version))

    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 2, 20), 200, seed=3))
    stream_until_caught_up(spark, tables, bootstrap)
    state = DeltaTable(tables.state)
    assert not handed & _files(state), "the stream's MERGEs replaced the handoff version's files"
    assert kept_versions.kept_state_versions(PipelineView.read(tables)) == [], "switched: the seed is in the checkpoint"
    assert state.metadata().configuration[delta_upkeep.RETENTION_PROPERTY] == delta_upkeep.retention(0)

    # the live handoff's stream restarts after more input; its tidies delete all that the MERGEs replaced
    produce(bootstrap, topic_name, tail_events(3, datetime(2026, 1, 3, 2), 150, seed=4))
    stream_until_caught_up(spark, tables, bootstrap)
    state = DeltaTable(tables.state)
    assert any(h.get("operation") == "VACUUM END" for h in state.history()), "the state writer vacuumed"
    assert _on_disk(tables.state) == _files(state), "all replaced is gone, the switched handoff's version too"
    assert_matches_oracle(spark, bootstrap, topic_name, tables)


def _switchyard(tables: Tables, bootstrap: str, *command: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"}
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *command, "--pipeline", PIPELINE.name, "--warehouse",
                           tables.warehouse, "--bootstrap", bootstrap], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)


def test_a_handoff_past_kafkas_retention_restarts_from_what_kafka_retains(spark, bootstrap, topic_name, tmp_path):
    """A handoff committed, then Kafka's retention deletes its start before the stream first runs: the stream
    refuses in one line naming the recovery; `switchyard handoff --restart-from-retained` commits a handoff from
    the earliest retained offsets with the deleted range recorded as lost (log and status); the stream then runs
    and equals the oracle over every record but the lost ones."""
    from kafka import TopicPartition

    tables, handoff = _handed_off(spark, bootstrap, topic_name, tmp_path, events=600, keys=10, partitions=2, days=1,
                                  seed=3, fraction=0.5)
    records = oracle.read_topic(bootstrap, topic_name)  # every record, before the retention deletes some
    start = handoff.start_offsets
    retained_from = start[1] + 20
    with admin_client(bootstrap) as admin:
        admin.delete_records({TopicPartition(topic_name, 1): retained_from})
    logged = handoff_log.entries(tables)

    refused = _switchyard(tables, bootstrap, "stream", "--until-caught-up")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr[-3000:]
    error = refused.stderr.strip().splitlines()[-1]  # the JVM may print a warning of its own before it
    assert error.startswith("switchyard stream: error: ") and refused.stderr.count("error") == 1, refused.stderr
    assert f"partition 1 offsets {start[1]}..{retained_from - 1} deleted" in error
    assert f"run `switchyard handoff --pipeline {PIPELINE.name} --restart-from-retained`" in error
    assert len(handoff_log.entries(tables)) == len(logged), "the refusal logs nothing"

    recovered = _switchyard(tables, bootstrap, "handoff", "--restart-from-retained")
    assert recovered.returncode == 0, recovered.stderr
    restarted = current_handoff(tables)
    assert restarted.handoff_id != handoff.handoff_id and restarted.state_version == handoff.state_version
    assert restarted.start_offsets == {0: start[0], 1: retained_from}
    lost = {"1": {"from": start[1], "to": retained_from, "records": 20}}
    committed = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
    assert details.of(committed).lost == lost
    assert details.of(committed).restarted_from == handoff.handoff_id
    assert pipeline_status(tables)["lost_offsets"] == [
        {"handoff_id": restarted.handoff_id, "partition": 1, "from": start[1], "to": retained_from, "records": 20}]
    again = _switchyard(tables, bootstrap, "handoff", "--restart-from-retained")
    assert again.returncode == 2 and "nothing is lost" in again.stderr, again.stderr

    stream_until_caught_up(spark, tables, bootstrap)
    archived = [r for r in records if r.offset < start[r.partition]]
    tail = [r for r in records if r.offset >= restarted.start_offsets[r.partition]]
    expected = oracle.through_stream(archived, tail, batch_ends(tables, restarted.handoff_id))
    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    dead = {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)}
    assert dead == expected.dead_letter
    accounting = pipeline_status(tables)["stream_accounting"]
    for p, (_, end) in {p: (0, max(r.offset for r in records if r.partition == p) + 1) for p in (0, 1)}.items():
        assert accounting[str(p)]["read"] == end - restarted.start_offsets[p], "read from the retained start on"
