"""The stream_health sensor: observations of the stream's progress, and an alert when it stalls or falls behind."""

import json
import time

import dagster as dg
import pytest

from switchyard.orchestration import sensors
from switchyard.orchestration.resources import KafkaResource, StreamMonitorResource, WarehouseResource
from switchyard.state_handoff.control import handoff_log, lease
from switchyard.state_handoff.control.details import Stopped
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.stream.layout import stream_dir, write_json_atomically
from switchyard.state_handoff.tables import Tables
from tests.support.dagster_defs import scope

HANDOFF_ID = "h0rch3strat1"


@pytest.fixture
def tables(tmp_path) -> Tables:
    return Tables(str(tmp_path / "warehouse"), "demo")


def _tick(tables: Tables, cursor: str | None = None):
    return sensors.evaluate(dg.build_sensor_context(cursor=cursor), scope(tables.pipeline),
                            warehouse=WarehouseResource(warehouse=tables.warehouse),
                            kafka=KafkaResource(bootstrap="127.0.0.1:9"),  # never asked: the log names no topic
                            monitor=StreamMonitorResource(stall_seconds=60, max_offsets_behind=100))


def _progress(tables: Tables, batch_id: int, behind: dict[str, int], updated: float | None = None) -> None:
    write_json_atomically(stream_dir(tables, HANDOFF_ID) / "progress.json", {
        "pid": 1, "updated": updated or time.time(), "handoff_id": HANDOFF_ID, "offsets_behind": behind,
        "latest_offsets": {"0": 500, "1": 500}, "input_rows_per_s": 120.5, "processed_rows_per_s": 240.0,
        "last_batch_ms": 800, "stream_watermark": "2026-01-02 23:40:00", "batch_id": batch_id})


def _split(result):
    """The progress observations (those with a batch id) and the check evaluations by check name."""
    observations = [e for e in result.asset_events if isinstance(e, dg.AssetObservation) and "batch_id" in e.metadata]
    evaluations = {e.check_name: e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)}
    return observations, evaluations


def _phases(result) -> list[str]:
    """The transitions relayed as observations (those without a batch id)."""
    return [e.metadata["phase"].value for e in result.asset_events
            if isinstance(e, dg.AssetObservation) and "batch_id" not in e.metadata]


def _backdate_batch(cursor: str, seconds: float) -> str:
    watch = json.loads(cursor)
    watch["batch_since"] -= seconds
    return json.dumps(watch)


def test_sensor_plots_progress_and_alerts_on_stall_and_lag(spark, tables):
    assert isinstance(_tick(tables), dg.SkipReason), "no handoff yet: nothing to watch"

    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED,
                   Status.SWITCHED):
        handoff_log.append(tables, HANDOFF_ID, status, start_offsets={0: 10, 1: 12})
    with lease.hold(tables, lease.STREAM):  # this test process stands in for the running stream
        _progress(tables, batch_id=4, behind={"0": 3, "1": 2})
        first = _tick(tables)
        (observation,), evaluations = _split(first)
        assert _phases(first) == ["STREAM_STARTED", "SWITCHED"]
        assert observation.asset_key == dg.AssetKey(["demo", "stream"])
        figures = {k: v.value for k, v in observation.metadata.items()}
        assert figures["offsets_behind"] == 5 and figures["input_rate"] == 120.5
        assert figures["processed_rate"] == 240.0 and figures["phase"] == "SWITCHED"
        assert figures["watermark_delay_s"] is None and figures["event_times"].startswith("historical")
        assert set(evaluations) == {"stream_is_healthy", "stream_process_alive", "stream_caught_up",
                                    "stream_update_latency", "stream_reconciled"}
        assert all(e.passed for e in evaluations.values()), {n: e.description for n, e in evaluations.items()}

        same = _tick(tables, first.cursor)
        assert same.asset_events == [] and "no new progress" in same.skip_reason.skip_message

        _progress(tables, batch_id=4, behind={"0": 3, "1": 2})  # alive, but the batch has not moved for 2 minutes
        stalled = _tick(tables, _backdate_batch(same.cursor, 120))
        observations, evaluations = _split(stalled)
        alert = evaluations["stream_is_healthy"]
        assert len(observations) == 1 and not alert.passed
        assert alert.description.startswith("no new batch for 12") and "5 offsets behind" in alert.description

        _progress(tables, batch_id=5, behind={"0": 300, "1": 200})
        behind = _tick(tables, stalled.cursor)
        evaluations = _split(behind)[1]
        alert, lagging = evaluations["stream_is_healthy"], evaluations["stream_caught_up"]
        assert not alert.passed and "500 offsets behind latest, past the threshold of 100" in alert.description
        assert not lagging.passed and lagging.severity == dg.AssetCheckSeverity.ERROR

        _progress(tables, batch_id=6, behind={"0": 0, "1": 0})
        recovered = _tick(tables, behind.cursor)
        evaluations = _split(recovered)[1]
        assert evaluations["stream_is_healthy"].passed and evaluations["stream_caught_up"].passed

    gone = _tick(tables, recovered.cursor)
    evaluations = _split(gone)[1]
    alert, alive = evaluations["stream_is_healthy"], evaluations["stream_process_alive"]
    assert not alert.passed and "gone without a clean stop" in alert.description
    assert not alive.passed and alive.severity == dg.AssetCheckSeverity.ERROR
    assert set(evaluations) == {"stream_is_healthy", "stream_process_alive"}, "only verdicts that changed"

    handoff_log.append(tables, HANDOFF_ID, Status.STOPPED, details=Stopped(reason="SIGTERM"))
    stopped = _tick(tables, gone.cursor)
    assert _phases(stopped) == ["STOPPED"]
    evaluations = _split(stopped)[1]
    assert evaluations["stream_is_healthy"].passed and evaluations["stream_is_healthy"].metadata["phase"].value == "STOPPED"
    assert evaluations["stream_process_alive"].passed
    assert evaluations["stream_process_alive"].description == "stopped cleanly (SIGTERM)"
