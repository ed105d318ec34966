"""The Dagster definitions: they load, the chain materializes against the real broker, GX gates block."""

import io
import os
import shutil
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from jobs.archive import archive_cut, run_archive
from jobs.backfill import run_backfill
from jobs.inputs.generate import run_generate
from orchestration.assets import handoff, keyed_state, tiles
from orchestration.checks import HANDOFF_EXPECTATIONS, handoff_offsets, state_is_sound
from orchestration.definitions import build_definitions, defs
from orchestration.expectations import run_suite
from orchestration.partitions import first_day
from orchestration.resources import KafkaResource, SparkResource, StreamMonitorResource, WarehouseResource
from state_handoff import handoff_log, lease
from state_handoff.errors import UserError
from state_handoff.io.archive_files import list_archive
from state_handoff.lifecycle import Status
from state_handoff.pipelines import get_pipeline
from state_handoff.tables import Tables
from tests.support import oracle

PIPELINE = get_pipeline("demo")
TOPIC = "orchestration.backlog"
DAYS = ("2025-12-31", "2026-01-01", "2026-01-02")
STREAM_CHECKS = ("stream_is_healthy", "stream_process_alive", "stream_caught_up", "stream_update_latency",
                 "stream_reconciled")
PLOTTED = ("offsets_behind", "update_latency_p50_s", "update_latency_p99_s", "input_rate", "processed_rate",
           "watermark_delay_s")
RANGE = {"dagster/asset_partition_range_start": DAYS[0], "dagster/asset_partition_range_end": DAYS[-1]}


class Backlog(NamedTuple):
    tables: Tables
    cut: dict[int, tuple[int, int]]


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def backlog(spark, bootstrap, tmp_path_factory) -> Backlog:
    """A small topic over two days from 2026-01-01, a few records malformed, its first 80% archived once."""
    run_generate(bootstrap, TOPIC, events=400, keys=12, partitions=2, days=2, seed=11, malformed_rate=0.05,
                 out=io.StringIO())
    tables = Tables(str(tmp_path_factory.mktemp("orchestration")), PIPELINE.name)
    cut = archive_cut(bootstrap, TOPIC, fraction=0.8)
    run_archive(spark, PIPELINE, tables, bootstrap, TOPIC, cut, out=_quiet)
    return Backlog(tables, cut)


@pytest.fixture
def tables(backlog, tmp_path) -> Tables:
    """A fresh warehouse holding a copy of the archive."""
    fresh = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    shutil.copytree(backlog.tables.archive, fresh.archive)
    return fresh


def resources(tables: Tables, bootstrap: str) -> dict:
    return {"spark": SparkResource(profile="test"), "kafka": KafkaResource(bootstrap=bootstrap),
            "warehouse": WarehouseResource(warehouse=tables.warehouse, pipeline=tables.pipeline),
            "monitor": StreamMonitorResource()}


def _events(result, event_type: str) -> list:
    return [e for e in result.all_events if e.event_type_value == event_type]


def _materializations(result) -> dict[str, list]:
    found: dict[str, list] = {}
    for event in _events(result, "ASSET_MATERIALIZATION"):
        m = event.event_specific_data.materialization
        found.setdefault(m.asset_key.to_user_string(), []).append(m)
    return found


def _observations(result, key: str) -> list:
    return [o for o in (e.event_specific_data.asset_observation for e in _events(result, "ASSET_OBSERVATION"))
            if o.asset_key.to_user_string() == key]


def _check_evaluations(result) -> dict:
    return {e.event_specific_data.check_name: e.event_specific_data
            for e in _events(result, "ASSET_CHECK_EVALUATION")}


def test_definitions_load_with_the_asset_graph():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert {k.to_user_string() for k in defs.resolve_all_asset_keys()} == {
        "archive", "tiles", "state", "windows", "window_state", "handoff", "stream"}
    assert {k.name for k in graph.asset_check_keys} == {
        "tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound", "handoff_is_contiguous",
        *STREAM_CHECKS}
    assert graph.get(dg.AssetKey("state")).freshness_policy == dg.FreshnessPolicy.time_window(
        fail_window=timedelta(hours=36), warn_window=timedelta(hours=26))
    assert {"rebase_stream", "stop_stream"} <= {j.name for j in defs.resolve_all_job_defs()}
    assert graph.get(dg.AssetKey("handoff")).parent_keys >= {dg.AssetKey("state")}
    assert graph.get(dg.AssetKey("stream")).parent_keys == {dg.AssetKey("handoff")}
    chain = defs.resolve_job_def("backfill_then_stream")
    assert chain.partitions_def.get_first_partition_key() == "2025-12-31"
    assert defs.resolve_assets_def("tiles").backfill_policy == dg.BackfillPolicy.single_run()
    assert set(defs.resolve_implicit_global_asset_job_def().resource_defs) >= {"spark", "kafka", "warehouse"}


def test_schedule_backfills_the_day_that_just_ended():
    schedule = defs.resolve_schedule_def("backfill_newest_day")
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 1, 5, 0, 30, tzinfo=timezone.utc),
                                       repository_def=defs.get_repository_def())
    requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-01-04"]
    assert schedule.job_name == "backfill_days"


def test_dagster_deprecations_from_project_code_fail_the_tests():
    with pytest.raises(DeprecationWarning, match="RunRequest\\(partition_key=...\\)"):
        defs.resolve_job_def("backfill_days").run_request_for_partition("2026-01-04")


def test_partitions_begin_at_the_archives_first_day(backlog):
    archived = sorted(f.day for f in list_archive(backlog.tables.archive))
    assert first_day({"SWITCHYARD_WAREHOUSE": backlog.tables.warehouse}) == str(archived[0]) == DAYS[0]
    assert first_day({"SWITCHYARD_WAREHOUSE": backlog.tables.warehouse, "SWITCHYARD_FIRST_DAY": "2026-01-02"}) \
        == "2026-01-02"
    today = datetime.now(timezone.utc).date().isoformat()
    assert first_day({"SWITCHYARD_WAREHOUSE": "/nonexistent/warehouse"}) == today, "nothing archived: today"
    with pytest.raises(UserError, match="SWITCHYARD_FIRST_DAY=1/2/2026: give the first daily partition as YYYY-MM-DD"):
        first_day({"SWITCHYARD_FIRST_DAY": "1/2/2026"})


def test_the_chain_runs_from_archive_to_a_caught_up_stream(spark, backlog, tables, bootstrap):
    job = build_definitions(resources(tables, bootstrap)).resolve_job_def("backfill_then_stream")
    result = job.execute_in_process(tags=RANGE)
    assert result.success

    archive = _observations(result, "archive")[0].metadata
    assert archive["topic"].value == TOPIC and archive["days"].value >= 2
    assert archive["end_offsets"].value == {str(p): hi for p, (_, hi) in backlog.cut.items()}

    done = _materializations(result)
    assert sorted(m.partition for m in done["tiles"]) == list(DAYS), "one run materializes the whole range"
    tiles = done["tiles"][0].metadata
    read, dead = tiles["records_read"].value, tiles["dead_lettered"].value
    assert read == sum(hi - lo for lo, hi in backlog.cut.values())
    assert 0 < dead < read and tiles["well_formed"].value == read - dead

    state = done["state"][0].metadata
    assert state["complete"].value is True and state["keys"].value > 0
    committed = handoff_log.latest(None, tables, Status.BACKFILL_COMMITTED)
    assert state["state_version"].value == committed.state_version
    assert {"windows", "window_state"} <= set(done)

    switch = done["handoff"][0].metadata
    assert switch["start_offsets"].value == {str(p): hi for p, (_, hi) in backlog.cut.items()}
    # what the stream process reported of itself through Pipes: each transition, and its figures under the
    # sensor's stable keys, as observations of `stream` while it ran to CAUGHT_UP
    reported = [o.metadata for o in _observations(result, "stream")]
    transitions = [m for m in reported if "at" in m]
    figures = [m for m in reported if "update_latency_p50_s" in m]
    assert len(transitions) + len(figures) == len(reported)
    stream_states = [m["phase"].value for m in transitions]
    assert stream_states[:2] == ["STREAM_STARTED", "SWITCHED"] and "CAUGHT_UP" in stream_states
    assert stream_states[-1] == "STOPPED", "what the stream logs as it ends is reported too"
    caught_up = next(m for m in transitions if m["phase"].value == "CAUGHT_UP")
    assert caught_up["handoff_id"].value == switch["handoff_id"].value and caught_up["offsets_behind"].value == 0
    assert caught_up["start_offsets"].value == switch["start_offsets"].value
    assert figures and all(set(PLOTTED) <= set(m) for m in figures), [sorted(m) for m in figures]
    assert {m["handoff_id"].value for m in figures} == {switch["handoff_id"].value}
    assert figures[-1]["phase"].value == "CAUGHT_UP" and figures[-1]["offsets_behind"].value == 0.0
    assert figures[-1]["watermark_delay_s"].value is None and figures[-1]["event_times"].value.startswith(
        "historical"), "January's events: no delay against the wall clock"
    assert done["stream"][0].metadata["caught_up"].value is True

    checks = _check_evaluations(result)
    assert set(checks) == {"tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound",
                           "handoff_is_contiguous", *STREAM_CHECKS}
    assert all(c.passed for c in checks.values()), {n: c.description for n, c in checks.items()}

    # after the switch the keyed state holds every well-formed record of the topic, backlog and tail alike
    expected = oracle.backlog(oracle.read_topic(bootstrap, TOPIC)).state
    state_rows = spark.read.format("delta").load(tables.state).collect()
    assert {r.key: (r.event_count, r.amount_min, r.amount_max) for r in state_rows} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.items()}

    # the schedule's backfill of a day once a stream has run: a rebase at a cut, never an overwrite under it
    rerun = build_definitions(resources(tables, bootstrap)).resolve_job_def("backfill_days") \
        .execute_in_process(partition_key=DAYS[-1])
    assert rerun.success
    rebased = _materializations(rerun)["tiles"][0].metadata
    assert rebased["rebased"].value is True and rebased["reconciliation_keys_different"].value == 0
    assert rebased["handoff_id"].value != switch["handoff_id"].value
    assert handoff_log.latest(None, tables, Status.HANDOFF_COMMITTED).handoff_id == rebased["handoff_id"].value
    state_rows = spark.read.format("delta").load(tables.state).collect()
    assert {r.key: (r.event_count, r.amount_min, r.amount_max) for r in state_rows} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.items()}

    # the handoff gate fails, naming the expectation, when a start offset leaves a gap after the archive
    start = {p: hi + 1 if p == 0 else hi for p, (_, hi) in backlog.cut.items()}
    outcomes = run_suite(handoff_offsets(spark, tables, start, bootstrap), "handoff", HANDOFF_EXPECTATIONS)
    failed = {o.expectation: o.unexpected_rows for o in outcomes if not o.passed}
    assert failed == {"expect_column_pair_values_to_be_equal(start_offset, archive_end)": 1}


def test_failing_state_expectation_blocks_the_handoff(spark, bootstrap, tables):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    bad_tile = (spark.read.format("delta").load(tables.tiles).limit(1)
                .withColumn("key", F.lit("tampered")).withColumn("amount_min", F.lit(5.0))
                .withColumn("amount_max", F.lit(1.0)))
    bad_tile.write.format("delta").mode("append").partitionBy("event_date").save(tables.tiles)

    result = dg.materialize([keyed_state, state_is_sound, handoff], resources=resources(tables, bootstrap),
                            raise_on_error=False)
    assert not result.success
    check = _check_evaluations(result)["state_is_sound"]
    assert not check.passed
    assert check.metadata["failed_expectations"].value == "expect_column_pair_values_a_to_be_greater_than_b(amount_max, amount_min)"
    assert check.metadata["unexpected_rows"].value == 1
    assert "handoff" not in _materializations(result)
    assert handoff_log.latest(None, tables, Status.HANDOFF_COMMITTED) is None


def test_backfill_assets_are_refused_while_another_actor_owns_the_pipeline(spark, bootstrap, tables):
    """Every writer holds the lease: a Dagster backfill racing a CLI stream (here this process holding the
    pipeline as `switchyard stream`) fails in one line naming the owner, and writes nothing to any table."""
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    written = (tables.tiles, tables.state, tables.windows, tables.window_state, tables.handoffs)
    before = {path: sorted(DeltaTable(path).file_uris()) for path in written}
    with lease.hold(tables, lease.STREAM):
        for assets, partition in (([tiles], DAYS[1]), ([keyed_state], None)):
            result = dg.materialize(assets, partition_key=partition, resources=resources(tables, bootstrap),
                                    raise_on_error=False)
            assert not result.success, assets
            failure = next(e.step_failure_data.user_failure_data for e in result.all_events if e.is_step_failure)
            assert failure is not None, "a one-line Dagster failure, not a traceback"
            assert failure.description.startswith(
                f"pipeline {PIPELINE.name} is owned by `switchyard stream` (pid {os.getpid()} on host ")
            assert "\n" not in failure.description
    # the data files (the holder's fence commits change no data)
    assert {path: sorted(DeltaTable(path).file_uris()) for path in written} == before, "nothing written under the owner"
