"""The stream_health sensor: observations of the stream's progress, and an alert when it stalls or falls behind."""

import json
import time

import dagster as dg
import pytest

from orchestration.resources import StreamMonitorResource, WarehouseResource
from orchestration.sensors import stream_health
from state_handoff import handoff_log, lease
from state_handoff.stream_control import stream_dir, write_json_atomically
from state_handoff.tables import Tables

HANDOFF_ID = "h0rch3strat1"


@pytest.fixture
def tables(tmp_path) -> Tables:
    return Tables(str(tmp_path / "warehouse"), "demo")


def _tick(tables: Tables, cursor: str | None = None):
    context = dg.build_sensor_context(cursor=cursor, resources={
        "warehouse": WarehouseResource(warehouse=tables.warehouse, pipeline=tables.pipeline),
        "monitor": StreamMonitorResource(stall_seconds=60, max_offsets_behind=100)})
    return stream_health(context)


def _progress(tables: Tables, batch_id: int, behind: dict[str, int], updated: float | None = None) -> None:
    write_json_atomically(stream_dir(tables, HANDOFF_ID) / "progress.json", {
        "pid": 1, "updated": updated or time.time(), "handoff_id": HANDOFF_ID, "offsets_behind": behind,
        "latest_offsets": {"0": 500, "1": 500}, "input_rows_per_s": 120.5, "processed_rows_per_s": 240.0,
        "last_batch_ms": 800, "stream_watermark": "2026-01-02 23:40:00", "batch_id": batch_id})


def _split(result):
    observations = [e for e in result.asset_events if isinstance(e, dg.AssetObservation)]
    evaluations = [e for e in result.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
    return observations, evaluations


def _backdate_batch(cursor: str, seconds: float) -> str:
    watch = json.loads(cursor)
    watch["batch_since"] -= seconds
    return json.dumps(watch)


def test_sensor_plots_progress_and_alerts_on_stall_and_lag(spark, tables):
    assert isinstance(_tick(tables), dg.SkipReason), "no handoff yet: nothing to watch"

    for status in (handoff_log.HANDOFF_COMMITTED, handoff_log.STREAM_STARTED, handoff_log.SWITCHED):
        handoff_log.append(spark, tables, HANDOFF_ID, status, start_offsets={0: 10, 1: 12})
    with lease.hold(tables, lease.STREAM):  # this test process stands in for the running stream
        _progress(tables, batch_id=4, behind={"0": 3, "1": 2})
        first = _tick(tables)
        (observation,), (evaluation,) = _split(first)
        assert observation.asset_key == dg.AssetKey("stream")
        figures = {k: v.value for k, v in observation.metadata.items()}
        assert figures["offsets_behind"] == 5 and figures["input_rows_per_s"] == 120.5
        assert figures["processed_rows_per_s"] == 240.0 and figures["status"] == "SWITCHED"
        assert figures["watermark_delay_s"] == pytest.approx(time.time() - 1767397200, abs=30)
        assert evaluation.check_name == "stream_is_healthy" and evaluation.passed

        same = _tick(tables, first.cursor)
        assert same.asset_events == [] and "no new progress" in same.skip_reason.skip_message

        _progress(tables, batch_id=4, behind={"0": 3, "1": 2})  # alive, but the batch has not moved for 2 minutes
        stalled = _tick(tables, _backdate_batch(same.cursor, 120))
        observations, (alert,) = _split(stalled)
        assert len(observations) == 1 and not alert.passed
        assert alert.description.startswith("no new batch for 12") and "5 offsets behind" in alert.description

        _progress(tables, batch_id=5, behind={"0": 300, "1": 200})
        behind = _tick(tables, stalled.cursor)
        (alert,) = _split(behind)[1]
        assert not alert.passed and "500 offsets behind latest, past the threshold of 100" in alert.description

        _progress(tables, batch_id=6, behind={"0": 0, "1": 0})
        recovered = _tick(tables, behind.cursor)
        (evaluation,) = _split(recovered)[1]
        assert evaluation.passed

    gone = _tick(tables, recovered.cursor)
    (alert,) = _split(gone)[1]
    assert not alert.passed and "gone without a clean stop" in alert.description

    handoff_log.append(spark, tables, HANDOFF_ID, handoff_log.STOPPED, details={"reason": "SIGTERM"})
    (evaluation,) = _split(_tick(tables, gone.cursor))[1]
    assert evaluation.passed and evaluation.metadata["status"].value == "STOPPED"
