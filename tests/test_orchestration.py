"""The Dagster definitions: they load, the backlog assets materialize against the real broker, GX gates block."""

from datetime import datetime, timezone
from typing import NamedTuple

import io

import dagster as dg
import pytest
from pyspark.sql import functions as F

from jobs.archive import archive_cut, run_archive
from jobs.generate import run_generate
from orchestration.definitions import build_definitions, defs
from orchestration.resources import KafkaResource, SparkResource, WarehouseResource
from state_handoff import handoff_log
from state_handoff.pipelines import get_pipeline
from state_handoff.tables import Tables

PIPELINE = get_pipeline("demo")
DAYS = ("2025-12-31", "2026-01-01", "2026-01-02")


class Backlog(NamedTuple):
    tables: Tables
    records: int


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def archived(spark, bootstrap, tmp_path_factory):
    """A small topic, 80% of it archived: events over two days from 2026-01-01, a few malformed."""
    topic = "orchestration.backlog"
    run_generate(bootstrap, topic, events=400, keys=12, partitions=2, days=2, seed=11, malformed_rate=0.05,
                 out=io.StringIO())
    warehouse = tmp_path_factory.mktemp("orchestration")
    tables = Tables(str(warehouse), PIPELINE.name)
    cut = archive_cut(bootstrap, topic, fraction=0.8)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, cut, out=_quiet)
    return Backlog(tables, sum(hi - lo for lo, hi in cut.values()))


def _resources(tables: Tables, bootstrap: str) -> dict:
    return {"spark": SparkResource(profile="test"), "kafka": KafkaResource(bootstrap=bootstrap),
            "warehouse": WarehouseResource(warehouse=tables.warehouse, pipeline=tables.pipeline)}


def _events(result, event_type: str) -> list:
    return [e for e in result.all_events if e.event_type_value == event_type]


def _check_evaluations(result) -> dict:
    return {e.event_specific_data.check_name: e.event_specific_data
            for e in _events(result, "ASSET_CHECK_EVALUATION")}


def test_definitions_load_with_the_asset_graph():
    dg.Definitions.validate_loadable(defs)
    keys = {k.to_user_string() for k in defs.resolve_all_asset_keys()}
    assert {"archive", "tiles", "state", "windows", "window_state"} <= keys
    checks = {k.name for k in defs.resolve_asset_graph().asset_check_keys}
    assert {"tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound"} <= checks
    assert defs.resolve_job_def("backfill_then_stream").partitions_def.get_first_partition_key() == "2025-12-31"
    tiles = defs.resolve_assets_def("tiles")
    assert tiles.backfill_policy == dg.BackfillPolicy.single_run()


def test_schedule_backfills_the_day_that_just_ended():
    schedule = defs.resolve_schedule_def("backfill_newest_day")
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 1, 5, 0, 30, tzinfo=timezone.utc),
                                       repository_def=defs.get_repository_def())
    requests = schedule.evaluate_tick(context).run_requests
    assert [(r.partition_key, r.job_name or schedule.job_name) for r in requests] == [("2026-01-04", "backfill_days")]


def test_backlog_assets_materialize_over_a_range_in_one_run(spark, archived, bootstrap):
    tables = archived.tables
    job = build_definitions(_resources(tables, bootstrap)).resolve_job_def("backfill_days")
    result = job.execute_in_process(tags={"dagster/asset_partition_range_start": DAYS[0],
                                          "dagster/asset_partition_range_end": DAYS[-1]})
    assert result.success

    observed = _events(result, "ASSET_OBSERVATION")[0].event_specific_data.asset_observation
    assert observed.metadata["topic"].value == "orchestration.backlog"
    assert observed.metadata["days"].value >= 2

    materialized = {}
    for event in _events(result, "ASSET_MATERIALIZATION"):
        m = event.event_specific_data.materialization
        materialized.setdefault(m.asset_key.to_user_string(), []).append(m)
    assert sorted(m.partition for m in materialized["tiles"]) == list(DAYS)
    tiles_meta = materialized["tiles"][0].metadata
    read, dead = tiles_meta["records_read"].value, tiles_meta["dead_lettered"].value
    assert read == archived.records
    assert dead > 0 and tiles_meta["well_formed"].value == read - dead

    state_meta = materialized["state"][0].metadata
    rows = spark.read.format("delta").load(tables.state)
    assert state_meta["keys"].value == rows.count() > 0
    assert state_meta["complete"].value is True
    assert rows.agg(F.sum("event_count")).first()[0] == read - dead
    assert state_meta["state_version"].value == handoff_log.latest(spark, tables, "BACKFILL_COMMITTED").state_version
    assert {"windows", "window_state"} <= set(materialized)

    checks = _check_evaluations(result)
    assert set(checks) == {"tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound"}
    assert all(c.passed for c in checks.values()), {n: c.description for n, c in checks.items()}
    assert checks["state_is_sound"].metadata["failed_expectations"].value == "none"
