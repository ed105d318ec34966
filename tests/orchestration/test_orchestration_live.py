"""A live stream as Dagster sees it and steers it: launched detached through Pipes, figures under stable keys, the
health checks green while it runs, the rebase and stop jobs; restarted and killed, a failed run carrying its last
log lines and the alive check red."""

import os
import signal
import threading
import time

import dagster as dg
import pytest

from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.orchestration.stream_launch import process_log
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.stream.layout import read_json, stream_dir
from switchyard.state_handoff.tables import Tables
from tests.support.dagster_defs import asset, checks_def, definitions, op_name
from tests.support.live_stream import PIPELINE, PLOTTED, archived_topic, live_events, read_past, resources, tick
from tests.support.streams import LaunchedStream, wait_until

TOPIC = "orchestration.live"
STREAM_OP = "demo__stream"
DETACHED = {"ops": {STREAM_OP: {"config": {"until_caught_up": False}}}}
FOR_A_WHILE = {"ops": {STREAM_OP: {"config": {"until_caught_up": False, "for_seconds": 900.0}}}}


def _quiet(*_):
    pass


def _observations(result) -> list[dict]:
    return [{k: v.value for k, v in e.event_specific_data.asset_observation.metadata.items()}
            for e in result.all_events if e.event_type_value == "ASSET_OBSERVATION"]


def _status_after(tables: Tables, seq: int, status: str):
    return next((e for e in handoff_log.entries(tables) if e.seq > seq and e.status == status), None)


def _last_seq(tables: Tables) -> int:
    return handoff_log.entries(tables)[-1].seq


def _kill_once_running(tables: Tables, after_seq: int, timeout: float = 900) -> None:
    """SIGKILL the stream started after `after_seq` mid-run: its queries started and its monitor reporting."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = _status_after(tables, after_seq, Status.STREAM_STARTED)
        if started is not None and lease.stream_running(tables):
            pid = details.of(started).pid
            progress = read_json(stream_dir(tables, started.handoff_id) / "progress.json") or {}
            if progress.get("pid") == pid:
                os.kill(pid, signal.SIGKILL)
                return
        time.sleep(0.5)


@pytest.fixture
def handed_off(spark, bootstrap, tmp_path) -> Tables:
    tables = archived_topic(spark, bootstrap, TOPIC, str(tmp_path / "warehouse"))
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    return tables


@pytest.mark.timeout(2400)  # two stream starts, a rebase and a stop: minutes each on a loaded two-core machine
def test_a_live_stream_seen_rebased_stopped_and_killed(handed_off, bootstrap):
    tables = handed_off
    defs = definitions(resources(tables, bootstrap))
    stream, stream_checks = asset(defs, "stream"), checks_def(defs, "stream_checks")
    assert op_name(defs, "stream") == STREAM_OP
    # detached: the run returns once the stream is SWITCHED; the stream outlives it, and the sensor observes it
    instance = dg.DagsterInstance.ephemeral()
    launched = dg.materialize([stream], resources=resources(tables, bootstrap), run_config=DETACHED,
                              instance=instance)
    assert launched.success
    assert [o["phase"] for o in _observations(launched) if "at" in o] == ["STREAM_STARTED", "SWITCHED"]
    assert launched.asset_materializations_for_node(STREAM_OP)[0].metadata["still_running"].value is True
    started = handoff_log.latest(tables, Status.STREAM_STARTED)
    process = LaunchedStream(details.of(started).pid)
    log = process_log(tables, started.handoff_id)
    try:
        assert process.poll() is None, f"the detached stream is gone with its run:\n{log.read_text()[-3000:]}"
        lines = [e.user_message for e in instance.all_logs(launched.run_id)]
        assert any("reporting to Dagster through Pipes until live" in line for line in lines), \
            "the stream's own log lines reach the run's log"
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None, process, log,
                   "CAUGHT_UP", timeout=900)
        produce(bootstrap, TOPIC, live_events(200, "live"))
        sent_at = time.time()
        wait_until(lambda: read_past(tables, sent_at), process, log, "the live events streamed", timeout=600)

        first = tick(tables, bootstrap)
        observations = [{k: v.value for k, v in e.metadata.items()} for e in first.asset_events
                        if isinstance(e, dg.AssetObservation)]
        figures = observations[-1]
        assert figures["phase"] in ("CAUGHT_UP", "SWITCHED")
        assert all(isinstance(figures[k], float) for k in PLOTTED), {k: figures[k] for k in PLOTTED}
        assert figures["offsets_behind"] == 0 and 0 <= figures["update_latency_p50_s"] <= figures["update_latency_p99_s"]
        assert 0 < figures["watermark_delay_s"] < 3600, "live events: the delay is against the wall clock"
        assert [o["phase"] for o in observations[:3]] == ["STREAM_STARTED", "SWITCHED", "CAUGHT_UP"]
        verdicts = {e.check_name: e for e in first.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
        assert {"stream_process_alive", "stream_caught_up", "stream_update_latency", "stream_reconciled",
                "stream_is_healthy"} <= set(verdicts)
        assert all(v.passed for v in verdicts.values()), {n: v.description for n, v in verdicts.items()}

        rebased = defs.resolve_job_def("demo__rebase_stream").execute_in_process()
        assert rebased.success
        steps = {o["phase"]: o for o in _observations(rebased)}
        assert {"REBASE_REQUESTED", "PAUSED", "HANDOFF_COMMITTED"} <= set(steps)
        assert steps["REBASE_REQUESTED"]["rebase_reason"] == "rebase"
        assert steps["HANDOFF_COMMITTED"]["reconciliation_keys_different"] == 0
        assert steps["HANDOFF_COMMITTED"]["rebase_s"] > 0

        after_rebase = tick(tables, bootstrap, first.cursor)
        reconciled = next(e for e in after_rebase.asset_events if isinstance(e, dg.AssetCheckEvaluation)
                          and e.check_name == "stream_reconciled")
        assert reconciled.passed and "reconciled" in reconciled.description

        seq = _last_seq(tables)
        stopped = defs.resolve_job_def("demo__stop_stream").execute_in_process(raise_on_error=False)
        assert stopped.success and _status_after(tables, seq, Status.STOPPED) is not None, \
            f"{[(e.status, details.of(e)) for e in handoff_log.entries(tables) if e.seq > seq]}\n" \
            f"{log.read_text()[-3000:]}"
        assert process.wait(timeout=300) == 0
        checks = dg.materialize([stream_checks], resources=resources(tables, bootstrap),
                                selection=dg.AssetSelection.checks(stream_checks))
        alive = {e.event_specific_data.check_name: e.event_specific_data for e in checks.all_events
                 if e.event_type_value == "ASSET_CHECK_EVALUATION"}["stream_process_alive"]
        assert alive.passed and alive.description.startswith("stopped cleanly")

        refused = defs.resolve_job_def("demo__stop_stream").execute_in_process(raise_on_error=False)
        assert not refused.success, "nothing to stop"

        # restarted through Dagster (it resumes its checkpoint) and killed: the run fails with the last log lines
        seq = _last_seq(tables)
        killer = threading.Thread(target=_kill_once_running, args=(tables, seq), daemon=True)
        killer.start()
        died = dg.materialize([stream], resources=resources(tables, bootstrap), run_config=FOR_A_WHILE,
                              raise_on_error=False)
        killer.join(timeout=60)
        assert not died.success
        failure = next(e.step_failure_data.user_failure_data for e in died.all_events
                       if e.event_type_value == "STEP_FAILURE")
        phases = [o["phase"] for o in _observations(died) if "at" in o]
        assert phases[0] == "STREAM_STARTED" and "SWITCHED" not in phases, phases
        assert failure.description.startswith(f"the stream process was killed by SIGKILL (last phase {phases[-1]})")
        restart_log = process_log(tables, _status_after(tables, seq, Status.STREAM_STARTED).handoff_id)
        output = failure.metadata["output"].value.strip("`\n").splitlines()
        assert output and set(output) <= set(restart_log.read_text().splitlines())
        assert any("resuming from checkpoint" in line for line in output), output
        assert failure.description.endswith(output[-1].strip())
        killed = dg.materialize([stream_checks], resources=resources(tables, bootstrap),
                                selection=dg.AssetSelection.checks(stream_checks), raise_on_error=False)
        evaluations = {e.event_specific_data.check_name: e.event_specific_data for e in killed.all_events
                       if e.event_type_value == "ASSET_CHECK_EVALUATION"}
        alive = evaluations["stream_process_alive"]
        assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
        assert "gone without a clean stop" in alive.description
        noticed = tick(tables, bootstrap, after_rebase.cursor)
        red = {e.check_name: e for e in noticed.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
        assert not red["stream_process_alive"].passed and not red["stream_is_healthy"].passed
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=300)

