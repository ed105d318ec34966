"""A changed definition switched in at a cut: the demo pipeline streams; its definition gains one aggregation
(tests/support/changed_pipeline.py); `switchyard redeploy` under the changed definition stops the live stream,
recomputes the state sort-based at a cut and hands off there, while events keep arriving. Checked against the
oracle: every old column as the stream would have it, the new column over all history, the serving table and the
updates topic switching at the recorded cut, every record aggregated, dead-lettered or late once. The same for
windows widened, their lateness doubled and an aggregation added: every window made again over all history up to
the cut, none of it late, and streamed on from there under the new windows; then an aggregation renamed, with
nothing recomputed; then the lateness changed, with only the windows made again. And a key changed: the state keyed
by other fields, compared with the recorded one over all keys, the old keys taken out of the updates topic."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from datetime import date, datetime

import pytest
from deltalake import DeltaTable
from kafka import KafkaConsumer

from switchyard.jobs.cli.priority import autogroups
from switchyard.jobs.stream.updates_topic import last_started_with, written_by
from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_rebase import FLAGS, ROOT, _handoffs, _prepare, _read_everything, assert_exact_across_handoffs
from tests.support.changed_pipeline import (DEMO, DEMO_BY_KIND, DEMO_KIND, DEMO_PLUS_ONE, DEMO_WIDER, DEMO_WIDER_LATER,
                                            DEMO_WIDER_RENAMED)
from tests.support.streams import event_batches, start_stream, tail_events, wait_until
from tests.support.yielding import JvmPriority

CHANGED = "tests.support.changed_pipeline:DEMO_PLUS_ONE"


def _cli(tables: Tables, bootstrap: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", *args, "--warehouse", tables.warehouse,
                             "--bootstrap", bootstrap], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", "PYTHONPATH": str(ROOT),
                                            **(env or {})})


def _rows(path: str) -> list:
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["key"])


def _has_largest2(tables: Tables, version: int) -> bool:
    return "largest2" in DeltaTable(tables.state, version=version).schema().to_arrow().names


def test_an_added_aggregation_is_redeployed_at_a_cut_under_a_live_stream(spark, bootstrap, topic_name, tmp_path):
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    log = tmp_path / "stream.log"
    old = start_stream(tables, bootstrap, log, *FLAGS)
    try:
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 80, seed=41))
        wait_until(lambda: _read_everything(tables, bootstrap, topic_name), old, log, what="the tail read")
        # under the changed definition, the stream refuses in one line, naming the way on
        refused = _cli(tables, bootstrap, "stream", "--pipeline", CHANGED)
        out, _ = refused.communicate(timeout=120)
        assert refused.returncode == 2 and out.count("\n") == 1, out
        assert f"`switchyard redeploy --pipeline {DEMO.name}` switches the changed one in at a cut" in out, out
        redeploy = _cli(tables, bootstrap, "redeploy", "--pipeline", CHANGED)
        jvm = JvmPriority(redeploy.pid)
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=42))  # while it runs
        out, _ = redeploy.communicate(timeout=600)
        # its JVM yielded the cores at the default niceness, in a session other than the live stream's
        assert jvm.seen(), "no JVM seen under the redeploy"
        assert jvm.nice == 10 and jvm.session != os.getsid(old.pid), jvm.where()
        if autogroups():
            assert jvm.autogroup == 10, jvm.where()  # the weight the scheduler gives its session against the stream's
        assert redeploy.returncode == 0, out + log.read_text()[-3000:]
        assert old.wait(timeout=120) == 0, "the recorded definition's stream stopped cleanly: " + log.read_text()
    finally:
        if old.poll() is None:
            os.kill(old.pid, signal.SIGKILL)
    assert "aggregations (largest2 added)" in out, out
    # the whole history was tiled while the recorded definition's stream still served, and those tiles were taken
    assert out.index("beside the live stream") < out.index("stopping the live stream") < \
        out.index("the tiles made beside the live stream replace"), out
    assert not os.path.exists(tables.path("redeploy_tiles")), "dropped once handed off"
    new_log = tmp_path / "changed.log"
    new = start_stream(tables, bootstrap, new_log, *FLAGS, pipeline=CHANGED)
    try:
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=43))
        wait_until(lambda: _read_everything(tables, bootstrap, topic_name), new, new_log, what="every record read")
    finally:
        os.kill(new.pid, signal.SIGTERM)
        assert new.wait(timeout=180) == 0, new_log.read_text()[-3000:]

    entries = handoff_log.entries(tables)
    statuses = [e.status for e in entries]
    asked = next(e for e in entries if e.status == Status.REBASE_REQUESTED)
    # no tiles run at the cut: the archive did not grow since the tiles made beside; the stop it asked for lifted
    # (for `switchyard serve`) once the changed definition was handed off
    assert statuses[statuses.index("STOP_REQUESTED"):statuses.index("STOP_REQUESTED") + 7] == [
        "STOP_REQUESTED", "STOPPED", "REBASE_REQUESTED", "PAUSED", "BACKFILL_COMMITTED", "HANDOFF_COMMITTED",
        "START_REQUESTED"], statuses
    redeployed = requests.as_details(requests.read(asked))["redeploy"]
    assert redeployed["beside"]["files"] and redeployed["beside"]["version"] == redeployed["version"]
    assert redeployed["version"] == definition.version(DEMO_PLUS_ONE)
    assert redeployed["record"]["version"] == definition.version(DEMO)
    first, cut = _handoffs(tables)
    committed = details.of(cut)
    assert committed.definition["version"] == definition.version(DEMO_PLUS_ONE)
    # the reconciliation compares what both definitions declare alike: equal at the cut
    assert committed.reconciliation["keys_different"] == 0 and committed.reconciliation["keys_recomputed"] > 0

    # every old column as one continuous stream from the first handoff would have it; dead letters, late records
    # and windows once each
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    # the added column over all history: the largest amount of each key's well-formed records
    state = {r["key"]: r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert {k: r["largest2"] for k, r in state.items()} == {k: s.amount_max for k, s in expected.state.items()}

    # serving switches at the cut: every version of `state` before the handoff's holds the recorded definition's
    # rows, every one from it on the changed definition's
    latest = DeltaTable(tables.state).version()
    assert [_has_largest2(tables, v) for v in range(latest + 1)] == \
        [False] * cut.state_version + [True] * (latest + 1 - cut.state_version)
    # and so does the updates topic: the recorded definition's updates, then the changed one's, never mixed
    consumer = KafkaConsumer(last_started_with(tables), bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    by_partition: dict[int, list] = {}
    for m in consumer:
        by_partition.setdefault(m.partition, []).append((written_by(m), "largest2" in json.loads(m.value)))
    consumer.close()
    seen = [u for updates in by_partition.values() for u in updates]
    assert {h for h, _ in seen} == {first.handoff_id, cut.handoff_id}, seen
    assert all(has == (h == cut.handoff_id) for h, has in seen), seen
    for updates in by_partition.values():
        handoffs = [h for h, _ in updates]
        assert handoffs == sorted(handoffs, key=lambda h: h == cut.handoff_id), "an old update after a new one"


def test_a_redeploy_that_dies_is_given_up_or_finished_at_its_cut(spark, bootstrap, topic_name, tmp_path):
    """Killed after its tiles, a redeploy leaves the recorded definition serving: its stream refuses to run past the
    open redeploy, `rebase --abandon` gives it up with the tiles put back, and that definition streams and rebases
    on. Killed after its state was committed at the cut, `redeploy` again finishes it at the same cut. `rollback`
    under the earlier definition then moves the pipeline back with its kept tiles restored, until they are
    dropped."""
    from switchyard.jobs.rebase.requests import abandon_rebase
    from switchyard.jobs.rebase.run import rebase_pipeline
    from switchyard.jobs.stream import StreamOptions, run_stream
    from switchyard.orchestration import PipelineDeployment, switchyard_definitions
    from switchyard.state_handoff import faults
    from switchyard.state_handoff.errors import UserError
    from tests.support.live_stream import resources

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    until_caught_up = StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1)

    def stream(pipeline):
        return run_stream(spark, pipeline, tables, bootstrap, until_caught_up, out=lambda *_: None)

    stream(DEMO)
    tiles_before = DeltaTable(tables.tiles).version()
    state_before = _rows(tables.state)
    killed = _cli(tables, bootstrap, "redeploy", "--pipeline", CHANGED, env={faults.ENV: "redeploy.after_tiles"})
    out, _ = killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL, out
    assert "largest2" in DeltaTable(tables.tiles).schema().to_arrow().names  # its tiles replaced the table
    try:
        stream(DEMO)
        raise AssertionError("the recorded definition streamed past an open redeploy")
    except UserError as refused:
        assert "`switchyard redeploy` under that definition finishes it" in str(refused), refused
    assert _rows(tables.state) == state_before, "the serving state untouched"
    abandon_rebase(tables, "test")
    assert DeltaTable(tables.tiles).version() > tiles_before
    assert "largest2" not in DeltaTable(tables.tiles).schema().to_arrow().names, "the tiles put back"
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=44))
    stream(DEMO)
    rebased = rebase_pipeline(DEMO, tables, bootstrap, "rebase", "test", lambda: spark, out=lambda *_: None)
    reconciliation = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED,
                                                   handoff_id=rebased.handoff_id)).reconciliation
    assert reconciliation["keys_different"] == 0, reconciliation

    killed = _cli(tables, bootstrap, "redeploy", "--pipeline", CHANGED, env={faults.ENV: "rebase.after_backfill"})
    out, _ = killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL, out
    # finished from Dagster: the code location's definition is the changed one; the handoff at the cut observed
    defs = switchyard_definitions([PipelineDeployment(DEMO_PLUS_ONE, first_day=date(2026, 1, 1))],
                                  resources=resources(tables, bootstrap))
    run = defs.resolve_job_def("demo__redeploy_stream").execute_in_process()
    assert run.success
    observed = {e.event_specific_data.asset_observation.metadata["phase"].value:
                {k: v.value for k, v in e.event_specific_data.asset_observation.metadata.items()}
                for e in run.all_events if e.event_type_value == "ASSET_OBSERVATION"}
    assert observed["HANDOFF_COMMITTED"]["definition_version"] == definition.version(DEMO_PLUS_ONE)
    assert observed["HANDOFF_COMMITTED"]["reconciliation_keys_different"] == 0
    entries = handoff_log.entries(tables)
    request_id = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED)).request_id
    assert [e.status for e in entries if details.request_id(e) == request_id].count(Status.PAUSED) == 1, \
        "finished at the cut the killed run paused at"
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=45))
    stream(DEMO_PLUS_ONE)
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    state = {r["key"]: r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    assert {k: r["largest2"] for k, r in state.items()} == {k: s.amount_max for k, s in expected.state.items()}
    assert [e.status for e in entries].count(Status.REBASE_ABANDONED) == 1

    # archived and tiled since under the changed definition: a rollback tiles only the days of those files
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.state_handoff.control import kept_versions

    run_archive(spark, DEMO_PLUS_ONE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    rebase_pipeline(DEMO_PLUS_ONE, tables, bootstrap, "rebase", "test", lambda: spark, out=lambda *_: None)

    # back to the recorded definition: a rollback, run under it, restores its tiles, kept since the redeploy

    wrong = _cli(tables, bootstrap, "rollback", "--pipeline", CHANGED)
    out, _ = wrong.communicate(timeout=120)
    assert wrong.returncode == 2 and out.count("\n") == 1 and "run it under that definition" in out, out
    kept = kept_versions.kept_tiles_versions(PipelineView.read(tables))
    assert len(kept) == 1 and "largest2" not in DeltaTable(tables.tiles, version=kept[0]).schema().to_arrow().names
    # from Dagster: the redeploy job of a code location holding the earlier definition, with `rollback`
    defs = switchyard_definitions([PipelineDeployment(DEMO, first_day=date(2026, 1, 1))],
                                  resources=resources(tables, bootstrap))
    run = defs.resolve_job_def("demo__redeploy_stream").execute_in_process(
        run_config={"ops": {"demo__redeploy_at_a_cut": {"config": {"rollback": True}}}})
    assert run.success
    asked = requests.read(handoff_log.latest(tables, Status.REBASE_REQUESTED))
    assert requests.as_details(asked)["reason"] == "rollback" and requests.as_details(asked)["redeploy"]["beside"]["restore"] == kept[0], asked
    back = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    assert back.request_id == asked.request_id and back.definition["version"] == definition.version(DEMO)
    at_cut = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED))
    archived = sum(a["read"] for a in at_cut.archive_accounting.values())
    assert 0 < at_cut.records_read < archived, f"the rollback tiled {at_cut.records_read} of {archived} archived"
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=46))
    stream(DEMO)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert "largest2" not in DeltaTable(tables.state).schema().to_arrow().names
    # the definition rolled back from is the one kept now, until dropped; a rollback to it is then refused
    forward = PipelineView.read(tables).ledger.previous_definition
    assert forward.record["version"] == definition.version(DEMO_PLUS_ONE) and not forward.dropped
    shown = _cli(tables, bootstrap, "status", "--pipeline", "demo").communicate(timeout=120)[0]
    assert f"kept for `switchyard rollback`: definition version {definition.version(DEMO_PLUS_ONE)}" in shown, shown
    dropped = _cli(tables, bootstrap, "redeploy", "--pipeline", "demo", "--drop-previous")
    out, _ = dropped.communicate(timeout=120)
    assert dropped.returncode == 0 and "dropped" in out, out
    assert kept_versions.kept_tiles_versions(PipelineView.read(tables)) == []
    assert "kept for `switchyard rollback`" not in \
        _cli(tables, bootstrap, "status", "--pipeline", "demo").communicate(timeout=120)[0]
    refused = _cli(tables, bootstrap, "rollback", "--pipeline", CHANGED)
    out, _ = refused.communicate(timeout=120)
    assert refused.returncode == 2 and out.count("\n") == 1 and "were dropped" in out, out


def _handed_off(spark, bootstrap: str, topic: str, tmp_path, pipeline, seed: int):
    """Two days of generated events (3% malformed) on `topic`, half of them archived, backfilled and handed off
    under `pipeline`: its tables, and its `stream` (_streamer)."""
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.jobs.inputs.generate import run_generate

    run_generate(bootstrap, topic, events=1200, keys=20, partitions=2, days=2, seed=seed, malformed_rate=0.03,
                 out=open(os.devnull, "w"))
    tables = Tables(str(tmp_path / "wh"), pipeline.name)
    run_archive(spark, pipeline, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.5),
                out=lambda *_: None)
    run_backfill(spark, pipeline, tables, out=lambda *_: None)
    run_handoff(spark, pipeline, tables, bootstrap)
    return tables, _streamer(spark, tables, bootstrap)


def _streamer(spark, tables: Tables, bootstrap: str):
    """`stream(pipeline)`: that definition's stream in this process until caught up, in batches of 400 offsets."""
    from switchyard.jobs.stream import StreamOptions, run_stream

    until_caught_up = StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1,
                                     max_offsets_per_trigger=400)
    return lambda pipeline: run_stream(spark, pipeline, tables, bootstrap, until_caught_up, out=lambda *_: None)


def test_changed_windows_are_made_again_over_all_history_at_a_cut(spark, bootstrap, topic_name, tmp_path):
    from switchyard.jobs.rebase.redeploy import redeploy_pipeline

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh")
    stream = _streamer(spark, tables, bootstrap)

    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 80, seed=51))
    stream(DEMO)
    assert DeltaTable(tables.late).to_pyarrow_table().num_rows, "records late under the recorded windows"
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=52))  # past the stream: the cut's
    said = []
    cut = redeploy_pipeline(DEMO_WIDER, tables, bootstrap, lambda: spark, out=said.append)
    assert any("windows (windows.amount_max added)" in line for line in said), said
    assert any("making every window again at the cut" in line for line in said), said
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=53))
    stream(DEMO_WIDER)

    handoffs = [e.handoff_id for e in _handoffs(tables)]
    assert handoffs[-1] == cut.handoff_id and len(handoffs) == 2, handoffs
    # up to the cut every record is backlog under the changed windows; the stream goes on from there with them
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables, backlog_to=1,
                                            window=DEMO_WIDER.windows.size, lateness=DEMO_WIDER.windows.allowed_lateness)
    assert expected.late, "late records after the cut, under the changed lateness"
    # the windows switched once: every version before the cut's commit has the recorded shape, every one after it
    # the changed one
    shapes = [("amount_max" in DeltaTable(tables.windows, version=v).schema().to_arrow().names)
              for v in range(DeltaTable(tables.windows).version() + 1)]
    assert shapes == sorted(shapes) and shapes[-1] and not shapes[0], shapes

    # an aggregation renamed: the recorded tiles' column renamed beside, nothing read from the archive
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 9), 40, seed=54))
    said = []
    redeploy_pipeline(DEMO_WIDER_RENAMED, tables, bootstrap, lambda: spark, out=said.append)
    assert any("nothing read from the archive" in line for line in said), said
    assert not any("tiling" in line for line in said), said
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 12), 40, seed=55))
    stream(DEMO_WIDER_RENAMED)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables, backlog_to=1, window=DEMO_WIDER.windows.size,
                                 lateness=DEMO_WIDER.windows.allowed_lateness, renamed={"amount_max": "largest"})
    assert "amount_max" not in DeltaTable(tables.state).schema().to_arrow().names

    # the windows' lateness changed: the tiles serve as they are, only the windows are made again at the cut
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 15), 40, seed=56))
    tiles_before = set(DeltaTable(tables.tiles).file_uris())
    said = []
    redeploy_pipeline(DEMO_WIDER_LATER, tables, bootstrap, lambda: spark, out=said.append)
    assert any("the recorded tiles serve as they are" in line for line in said), said
    assert set(DeltaTable(tables.tiles).file_uris()) == tiles_before, "the tiles untouched"
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 18), 40, seed=57))
    stream(DEMO_WIDER_LATER)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables, backlog_to=3, window=DEMO_WIDER.windows.size,
                                 lateness=DEMO_WIDER_LATER.windows.allowed_lateness, renamed={"amount_max": "largest"})


def test_a_changed_key_is_redeployed_at_a_cut_and_the_old_keys_leave_the_updates_topic(spark, bootstrap, topic_name,
                                                                                      tmp_path):
    """A pipeline keyed by `key` moves to the key (key, kind). Nothing of its state can be re-keyed: the whole history
    is tiled again under the changed key and the windows (per key) are made again at the cut; the reconciliation
    compares the two states merged over all their keys. The oracle keyed by (key, kind) holds across the handoffs,
    and the updates topic, read as the compacted table it is, holds exactly the new keys with their state."""
    from switchyard.jobs.rebase.redeploy import redeploy_pipeline

    tables, stream = _handed_off(spark, bootstrap, topic_name, tmp_path, DEMO_KIND, seed=61)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 80, seed=61))
    stream(DEMO_KIND)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=62))  # past the stream: the cut's
    said = []
    cut = redeploy_pipeline(DEMO_BY_KIND, tables, bootstrap, lambda: spark, out=said.append)
    assert any("(key)" in line or "key," in line for line in said if "definition version" in line), said
    assert any("merged over all keys" in line for line in said), said
    reconciliation = details.of(_handoffs(tables)[-1]).reconciliation
    assert reconciliation["keys_different"] == 0 and reconciliation["keys_recomputed"] == 1, reconciliation
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=63))
    stream(DEMO_BY_KIND)

    assert [e.handoff_id for e in _handoffs(tables)][-1] == cut.handoff_id
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables, backlog_to=1, keys=("key", "kind"))
    _assert_topic_holds_the_state(tables, bootstrap, ("key", "kind"))


def _assert_topic_holds_the_state(tables: Tables, bootstrap: str, keys: tuple[str, ...]) -> None:
    """The updates topic, read as the compacted table it is (a tombstone takes a key out), holds exactly the keys
    of `state`, each with its count."""
    latest = {}
    consumer = KafkaConsumer(last_started_with(tables), bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                             enable_auto_commit=False, consumer_timeout_ms=5000)
    try:
        for record in consumer:
            if record.value is None:
                latest.pop(record.key, None)
            else:
                latest[record.key] = json.loads(record.value)
    finally:
        consumer.close()
    state = {tuple(r[k] for k in keys): r for r in DeltaTable(tables.state).to_pyarrow_table().to_pylist()}
    in_topic = {}
    if len(keys) > 1:
        old_shape = [key for key in latest if not key.startswith(b"{")]
        assert not old_shape, f"keys of the recorded shape left in the updates topic: {old_shape[:3]}"
        for key, value in latest.items():
            fields = json.loads(key)
            assert set(fields) == set(keys), key
            in_topic[tuple(fields[k] for k in keys)] = value
    else:
        in_topic = {(key.decode(),): value for key, value in latest.items()}
    assert set(in_topic) == set(state)
    assert all(in_topic[k]["event_count"] == state[k]["event_count"] for k in state)


def _kindless(records: list[tuple], every: int = 4) -> list[tuple]:
    """`records` (tail_events') with every `every`th JSON object's `kind` taken out."""
    changed = []
    for i, (key, value, partition, headers) in enumerate(records):
        body = json.loads(value) if value and value.startswith(b"{") and i % every == 0 else None
        if isinstance(body, dict) and "kind" in body:
            del body["kind"]
            value = json.dumps(body).encode()
        changed.append((key, value, partition, headers))
    return changed


def _offsets_in(path: str) -> set[tuple[int, int]]:
    return {(r["kafka_partition"], r["kafka_offset"])
            for r in DeltaTable(path).to_pyarrow_table(columns=["kafka_partition", "kafka_offset"]).to_pylist()}


def test_a_field_made_required_is_redeployed_at_a_cut_with_the_dead_letters_made_again(spark, bootstrap, topic_name,
                                                                                       tmp_path, monkeypatch):
    """The demo's optional `kind` made required (DEMO_KIND): a change of how records parse. Records without a kind
    the recorded definition aggregated (archived, archived after it streamed them, streamed past the archive, and past
    the stream at the cut) are dead letters under the changed one: the dead letters are made again over all history
    (beside the stream for the archive, at the cut for the rest), the state, windows and late records too, and the
    oracle parsing every record as the changed definition does holds across the handoffs. A first attempt that dies
    at the cut and is given up puts `dead_letter` back as it was."""
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.rebase import cut as rebase_cut
    from switchyard.jobs.rebase.redeploy import redeploy_pipeline
    from switchyard.jobs.rebase.requests import abandon_rebase
    from switchyard.state_handoff import faults
    from tests.support import oracle

    tables, stream = _handed_off(spark, bootstrap, topic_name, tmp_path, DEMO, seed=71)
    produce(bootstrap, topic_name, _kindless(tail_events(2, datetime(2026, 1, 2, 20), 80, seed=71)))
    stream(DEMO)
    # the archive grows over what the stream read; then more is streamed past it, and more arrives past the stream
    run_archive(spark, DEMO, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    produce(bootstrap, topic_name, _kindless(tail_events(2, datetime(2026, 1, 3, 2), 40, seed=72)))
    stream(DEMO)
    produce(bootstrap, topic_name, _kindless(tail_events(2, datetime(2026, 1, 3, 4), 40, seed=73)))

    # a first attempt dies at the cut once the archived records' dead letters were replaced (in this process: the
    # crash point raises); given up, it leaves `dead_letter` and `tiles` as the recorded definition made them
    dead_before, tiles_before = _offsets_in(tables.dead_letter), DeltaTable(tables.tiles).version()

    class Died(BaseException):
        pass

    def die_at(point: str) -> None:
        if point == "redeploy.after_tiles":
            raise Died(point)

    monkeypatch.setattr(faults, "reach", die_at)
    with pytest.raises(Died):
        redeploy_pipeline(DEMO_KIND, tables, bootstrap, lambda: spark, out=lambda *_: None)
    monkeypatch.undo()
    assert _offsets_in(tables.dead_letter) != dead_before, "the archived records' dead letters were replaced"
    abandon_rebase(tables, "test")
    assert _offsets_in(tables.dead_letter) == dead_before
    assert set(DeltaTable(tables.tiles).file_uris()) == set(DeltaTable(tables.tiles, version=tiles_before).file_uris())

    # [E, C) caught up in several batches, as a burst's is (the oracle follows the batches recorded)
    monkeypatch.setattr(rebase_cut, "CATCH_UP_BATCH", 20)
    old_handoff = _handoffs(tables)[0].handoff_id
    batches_before = len(event_batches(tables, old_handoff))
    said = []
    redeploy_pipeline(DEMO_KIND, tables, bootstrap, lambda: spark, out=said.append)
    assert len(event_batches(tables, old_handoff)) >= batches_before + 3, "the catch-up took [E, C) in batches"
    assert any("(fields)" in line or "fields," in line for line in said if "definition version" in line), said
    assert any("reconciliation not made" in line for line in said), said
    committed = [e for e in handoff_log.entries(tables) if e.status == Status.BACKFILL_COMMITTED][-1]
    remade = details.of(committed).at_cut["dead_letters_remade"]
    assert remade["read"] == remade["well_formed"] + remade["dead_lettered"] and remade["dead_lettered"] > 0, remade
    assert not os.path.exists(tables.path("redeploy_dead_letter")), "dropped once handed off"
    produce(bootstrap, topic_name, _kindless(tail_events(2, datetime(2026, 1, 3, 6), 40, seed=74)))
    stream(DEMO_KIND)

    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables, backlog_to=1,
                                            classified=oracle.kind_required)
    assert sum(reason == "missing_kind" for reason in expected.dead_letter.values()) >= 40
    _assert_topic_holds_the_state(tables, bootstrap, ("key",))
