"""A pipeline definition's version: what changes it (and what does not), recorded by the log's commits, and a
changed definition refused in one line by every command that would build on the tables, before any JVM, with
`switchyard status` showing both versions."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control import pins as pipeline_settings
from switchyard.state_handoff.control.details import BackfillCommitted, HandoffCommitted
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.spec import Field, count, maximum
from switchyard.state_handoff.tables import Tables
from tests.support.changed_pipeline import DEMO, DEMO_BY_KIND, DEMO_KIND, DEMO_PLUS_ONE, DEMO_WIDER


def test_what_shapes_the_state_changes_the_version_and_nothing_else_does():
    assert definition.version(DEMO) == definition.version(dataclasses.replace(DEMO, description="reworded"))
    assert definition.version(DEMO) == definition.version(dataclasses.replace(DEMO))
    changed = {
        "aggregations": DEMO_PLUS_ONE,
        "fields": dataclasses.replace(DEMO, fields=DEMO.fields + (Field("note", "string", required=False),)),
        "windows": dataclasses.replace(DEMO, windows=dataclasses.replace(
            DEMO.windows, allowed_lateness=DEMO.windows.allowed_lateness + timedelta(minutes=1))),
    }
    for part, pipeline in changed.items():
        now, then = definition.parts(pipeline), definition.parts(DEMO)
        assert [k for k in now if now[k] != then[k]] == [part], part
        assert definition.version(pipeline) != definition.version(DEMO)
    windowed_count = dataclasses.replace(DEMO, windows=dataclasses.replace(DEMO.windows, aggregations=(count("n"),)))
    assert definition.version(windowed_count) != definition.version(DEMO)


def test_the_outputs_added_dropped_renamed_or_changed_are_named():
    recorded = definition.as_details(DEMO)[definition.KEY]
    first, second = DEMO.aggregations[0], DEMO.aggregations[1]
    assert definition.changes(recorded, DEMO) == []
    assert definition.changes(recorded, DEMO_PLUS_ONE) == ["aggregations (largest2 added)"]
    edited = dataclasses.replace(DEMO, aggregations=(dataclasses.replace(first, name=f"{first.name}_renamed"),
                                                     *DEMO.aggregations[2:], maximum("largest2", "amount")))
    assert definition.changes(recorded, edited) == [
        f"aggregations (largest2 added, {second.name} dropped, {first.name} renamed {first.name}_renamed)"]
    retyped = dataclasses.replace(DEMO, aggregations=(dataclasses.replace(first, kind="max", column="amount")
                                                      if first.kind == "count" else
                                                      dataclasses.replace(first, kind="count", column=None),
                                                      *DEMO.aggregations[1:]))
    assert definition.changes(recorded, retyped) == [f"aggregations ({first.name} changed)"]
    windowed = dataclasses.replace(DEMO, windows=dataclasses.replace(DEMO.windows, aggregations=(count("n"),)))
    assert definition.changes(recorded, windowed) == [
        "windows (windows.amount_sum dropped, windows.event_count renamed windows.n)"]
    unnamed = {k: v for k, v in recorded.items() if k != "outputs"}  # recorded before outputs were
    assert definition.changes(unnamed, DEMO_PLUS_ONE) == ["aggregations"]


def test_only_dropped_or_renamed_aggregations_are_projected_from_the_recorded_tiles():
    recorded = definition.as_details(DEMO_PLUS_ONE)[definition.KEY]
    first = DEMO.aggregations[0]
    assert definition.projection(DEMO, recorded) == {a.name: a.name for a in DEMO.aggregations}  # largest2 dropped
    renamed = dataclasses.replace(DEMO_PLUS_ONE, aggregations=(dataclasses.replace(first, name="n"),
                                                               *DEMO_PLUS_ONE.aggregations[1:]))
    assert definition.projection(renamed, recorded)["n"] == first.name
    assert definition.projection(DEMO_PLUS_ONE, definition.as_details(DEMO)[definition.KEY]) is None  # added
    changed = dataclasses.replace(DEMO_PLUS_ONE, aggregations=(*DEMO.aggregations, maximum("largest2", "event_time")))
    assert definition.projection(changed, recorded) is None
    assert definition.projection(dataclasses.replace(DEMO_WIDER, aggregations=DEMO.aggregations), recorded) is None


def test_a_definition_change_is_found_once_with_everything_a_redeploy_depends_on():
    """`diff` of each change a cut takes: what the reconciliation compares, whether the key, the parse or the windows
    change, which recorded tiles serve; a rebase under its own definition changes nothing."""
    recorded = definition.as_details(DEMO)[definition.KEY]
    added = definition.diff(recorded, DEMO_PLUS_ONE)
    assert added.compared.aggregations == DEMO.aggregations, "largest2 is in no streamed state"
    assert (added.key_changed, added.reparsed, added.windows_remade, added.projection) == (False, False, False, None)
    assert not added.moves_updates_topic and added.recorded_keys == DEMO.keys and added.record == recorded

    widened = definition.diff(recorded, DEMO_WIDER)
    assert widened.windows_remade and not widened.key_changed and not widened.reparsed
    assert widened.compared.aggregations == DEMO.aggregations and widened.compared.windows == DEMO_WIDER.windows

    dropped = definition.diff(definition.as_details(DEMO_PLUS_ONE)[definition.KEY], DEMO)
    assert dropped.projection == {a.name: a.name for a in DEMO.aggregations} and not dropped.windows_remade

    rekeyed = definition.diff(definition.as_details(DEMO_KIND)[definition.KEY], DEMO_BY_KIND)
    assert rekeyed.key_changed and rekeyed.windows_remade and not rekeyed.reparsed and rekeyed.projection is None
    assert rekeyed.moves_updates_topic and rekeyed.recorded_keys == DEMO_KIND.keys
    assert rekeyed.compared.keys == DEMO_BY_KIND.keys and rekeyed.compared.aggregations == DEMO_BY_KIND.aggregations

    reparsed = definition.diff(recorded, DEMO_KIND)
    assert reparsed.reparsed and reparsed.windows_remade and reparsed.moves_updates_topic
    assert not reparsed.key_changed and reparsed.projection is None

    flat = dataclasses.replace(DEMO_KIND, windows=None)
    flat_by_kind = definition.diff(definition.as_details(flat)[definition.KEY], dataclasses.replace(DEMO_BY_KIND,
                                                                                                   windows=None))
    assert flat_by_kind.key_changed and not flat_by_kind.windows_remade, "no windows to make again"

    same = definition.unchanged(DEMO)
    assert same.compared is DEMO and same.record is None and same.recorded_keys == DEMO.keys
    assert not (same.key_changed or same.reparsed or same.windows_remade or same.moves_updates_topic)
    assert same.projection is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        same.reparsed = True


def _made_with(tmp_path, pipeline) -> Tables:
    tables = Tables(str(tmp_path / "wh"), pipeline.name)
    handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)
    handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED,
                       details=BackfillCommitted(**definition.as_details(pipeline)))
    return tables


def test_a_changed_definition_is_refused_by_settling_and_the_same_one_is_not(tmp_path):
    tables = _made_with(tmp_path, DEMO)
    pipeline_settings.settle(tables, "switchyard stream", env={}, pipeline=DEMO)
    with pytest.raises(UserError, match=r"^pipeline demo's definition changed since its backfill h1 \(its "
                                        r"aggregations \(largest2 added\): version \w+ then, \w+ now\)") as refused:
        pipeline_settings.settle(tables, "switchyard stream", env={}, pipeline=DEMO_PLUS_ONE)
    assert "\n" not in str(refused.value)
    unrecorded = Tables(str(tmp_path / "old"), "demo")  # a log from before definitions were recorded
    handoff_log.append(unrecorded, "h1", Status.BACKFILL_STARTED)
    handoff_log.append(unrecorded, "h1", Status.BACKFILL_COMMITTED)
    pipeline_settings.settle(unrecorded, "switchyard stream", env={}, pipeline=DEMO_PLUS_ONE)


def test_the_commands_refuse_before_any_jvm_and_status_shows_both_versions(tmp_path):
    tables = _made_with(tmp_path, DEMO)
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, start_offsets={0: 0},
                       details=HandoffCommitted(topic="t", **definition.as_details(DEMO)))
    changed = "tests.support.changed_pipeline:DEMO_PLUS_ONE"
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for command in (["stream"], ["backfill"], ["rebase"], ["handoff"]):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *command, "--pipeline", changed,
                               "--warehouse", tables.warehouse, "--bootstrap", "127.0.0.1:9"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        error = done.stderr.strip().splitlines()
        assert len(error) == 1 and "definition changed since its handoff h1 (its aggregations" in error[0], error
        assert time.monotonic() - started < 30, "refused before a JVM started"
    shown = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "status", "--pipeline", changed,
                            "--warehouse", tables.warehouse], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert (f"DEFINITION CHANGED: version {definition.version(DEMO_PLUS_ONE)} now, {definition.version(DEMO)} in "
            "the tables (aggregations (largest2 added))") in shown.stdout, shown.stdout


def test_redeploy_refuses_before_any_jvm_what_a_cut_cannot_take(tmp_path):
    tables = _made_with(tmp_path, DEMO)
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, start_offsets={0: 0},
                       details=HandoffCommitted(topic="t", **definition.as_details(DEMO)))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    for pipeline, said in (("demo", "there is nothing to redeploy"),
                           ("tests.support.changed_pipeline:DEMO_UNWINDOWED",
                            "cannot be redeployed at a cut: it drops windows")):
        started = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "redeploy", "--pipeline", pipeline,
                               "--warehouse", tables.warehouse, "--bootstrap", "127.0.0.1:9"],
                              capture_output=True, text=True, env=env, timeout=120)
        error = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(error) == 1 and said in error[0], (pipeline, done.stdout, done.stderr)
        assert time.monotonic() - started < 30, "refused before a JVM started"
    recorded = definition.as_details(DEMO)["definition"]
    assert definition.refuse_redeploy(DEMO_PLUS_ONE, recorded) is None
    assert definition.refuse_redeploy(DEMO_WIDER, recorded) is None
    assert "gains windows" in definition.refuse_redeploy(DEMO, definition.as_details(
        dataclasses.replace(DEMO, windows=None))["definition"])
    assert "drops windows" in definition.refuse_redeploy(dataclasses.replace(DEMO, windows=None), recorded)
    # another key: taken at a cut (its windows made again), unless the record does not name the key it replaces
    kind_recorded = definition.as_details(DEMO_KIND)["definition"]
    assert definition.refuse_redeploy(DEMO_BY_KIND, kind_recorded) is None
    assert definition.windows_changed(DEMO_BY_KIND, kind_recorded) and definition.projection(
        DEMO_BY_KIND, kind_recorded) is None
    unnamed = {k: v for k, v in kind_recorded.items() if k != "keys"}  # as recorded before records named the key
    assert "does not name its key's fields" in definition.refuse_redeploy(DEMO_BY_KIND, unnamed)
    # a field made required: records parse otherwise, so the dead letters and windows are made again at the cut
    assert definition.refuse_redeploy(DEMO_KIND, recorded) is None
    assert definition.reparsed(DEMO_KIND, recorded) and definition.windows_changed(DEMO_KIND, recorded)
    assert definition.projection(DEMO_KIND, recorded) is None
    assert not definition.reparsed(DEMO_BY_KIND, kind_recorded) and not definition.reparsed(DEMO_PLUS_ONE, recorded)


def test_vacuum_keeps_the_tiles_an_open_redeploy_replaced_and_then_the_previous_definitions(tmp_path):
    """A redeploy's tiles replace `tiles` before its handoff: until that handoff, `rebase --abandon` restores the
    version before them, and after it `switchyard rollback` does; a vacuum in between (a crash, a rerun hours later)
    must keep that version's files either way, until --drop-previous."""
    from switchyard.state_handoff.control import kept_versions, requests
    from switchyard.state_handoff.control.view import PipelineView

    def kept_tiles_versions(tables):
        return kept_versions.kept_tiles_versions(PipelineView.read(tables))

    tables = _made_with(tmp_path, DEMO)
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, start_offsets={0: 0},
                       details=HandoffCommitted(topic="t", **definition.as_details(DEMO)))
    asked = requests.ask(tables, requests.RebaseRequest(
        handoff_id="h1", requested_by="test", reason="redeploy", redeploy=requests.RedeployPlan(
            definition.version(DEMO_PLUS_ONE), definition.as_details(DEMO)[definition.KEY], tiles_version=7)))
    assert kept_tiles_versions(tables) == [7], "open: kept for an abandon"
    handoff_log.append(tables, "h2", Status.BACKFILL_COMMITTED,
                       details=BackfillCommitted(at_cut={"request_id": asked.request_id},
                                                 **definition.as_details(DEMO_PLUS_ONE)))
    handoff_log.append(tables, "h2", Status.HANDOFF_COMMITTED, start_offsets={0: 5},
                       details=HandoffCommitted(topic="t", request_id=asked.request_id,
                                                **definition.as_details(DEMO_PLUS_ONE)))
    assert kept_tiles_versions(tables) == [7], "handed off: kept for a rollback"
    requests.ask(tables, requests.PreviousDropped(handoff_id="h2", requested_by="test",
                                                  redeploy_request=asked.request_id, tiles_version=7))
    assert kept_tiles_versions(tables) == []
