"""The Dagster definitions: they load, the chain materializes against the real broker, GX gates block."""

import dataclasses
import io
import os
import shutil
from datetime import datetime, timedelta, timezone
from typing import NamedTuple

import dagster as dg
import pytest
from deltalake import DeltaTable
from pyspark.sql import functions as F

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.inputs.generate import run_generate
from switchyard.orchestration.checks import HANDOFF_EXPECTATIONS, handoff_offsets
from switchyard.orchestration.definitions import defs
from switchyard.orchestration.expectations import run_suite
from switchyard.orchestration.factory import switchyard_definitions
from switchyard.orchestration.resources import KafkaResource, SparkResource, StreamMonitorResource, WarehouseResource
from switchyard.orchestration.scope import PipelineDeployment, SwitchyardTranslator
from switchyard.state_handoff.control import handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.dagster_defs import asset, checks_def, definitions, scope

PIPELINE = get_pipeline("demo")
# a team's own pipeline, declared as an object at a module's top level, registered nowhere
ORDERS = dataclasses.replace(PIPELINE, name="orders_object")
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
    return {"switchyard_spark": SparkResource(profile="test"), "switchyard_kafka": KafkaResource(bootstrap=bootstrap),
            "switchyard_warehouse": WarehouseResource(warehouse=tables.warehouse),
            "switchyard_monitor": StreamMonitorResource()}


def _events(result, event_type: str) -> list:
    return [e for e in result.all_events if e.event_type_value == event_type]


def _materializations(result) -> dict[str, list]:
    found: dict[str, list] = {}
    for event in _events(result, "ASSET_MATERIALIZATION"):
        m = event.event_specific_data.materialization
        found.setdefault(m.asset_key.path[-1], []).append(m)
    return found


def _observations(result, key: str) -> list:
    return [o for o in (e.event_specific_data.asset_observation for e in _events(result, "ASSET_OBSERVATION"))
            if o.asset_key.path[-1] == key]


def _check_evaluations(result) -> dict:
    return {e.event_specific_data.check_name: e.event_specific_data
            for e in _events(result, "ASSET_CHECK_EVALUATION")}


def test_the_code_location_holds_two_pipelines_side_by_side():
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    demo = {"archive", "tiles", "state", "windows", "window_state", "handoff", "stream"}
    assert {k.to_user_string() for k in defs.resolve_all_asset_keys()} == {
        f"{p}/{a}" for p in ("demo", "kinds") for a in demo}
    for pipeline in ("demo", "kinds"):
        at = scope(pipeline)
        assert {graph.get(k).group_name for k in graph.get_all_asset_keys() if k.path[0] == pipeline} == {pipeline}
        assert {k.name for k in graph.asset_check_keys if k.asset_key.path[0] == pipeline} == {
            "tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound",
            "handoff_is_contiguous", "archive_within_retention", *STREAM_CHECKS}
        assert graph.get(at.key("state")).freshness_policy == dg.FreshnessPolicy.time_window(
            fail_window=timedelta(hours=36), warn_window=timedelta(hours=26))
        assert graph.get(at.key("handoff")).parent_keys >= {at.key("state")}
        assert graph.get(at.key("stream")).parent_keys == {at.key("handoff")}
        assert graph.get(at.key("tiles")).tags["switchyard/pipeline"] == pipeline
        chain = defs.resolve_job_def(f"{pipeline}__backfill_then_stream")
        assert chain.partitions_def.get_first_partition_key() == "2025-12-31"
        assert {f"{pipeline}__{job}" for job in ("rebase_stream", "redeploy_stream", "stop_stream", "backfill_days")} \
            <= {j.name for j in defs.resolve_all_job_defs()}
        assert defs.resolve_assets_def(at.key("tiles")).backfill_policy == dg.BackfillPolicy.single_run()
        assert defs.resolve_sensor_def(f"{pipeline}__stream_health").default_status == dg.DefaultSensorStatus.RUNNING
    assert set(defs.resolve_implicit_global_asset_job_def().resource_defs) >= {"switchyard_spark", "switchyard_kafka",
                                                                           "switchyard_warehouse"}


def test_a_pipeline_without_windows_has_no_window_assets_and_a_translator_renames_everything(monkeypatch):
    class Team(SwitchyardTranslator):
        def get_asset_key(self, pipeline, asset):
            return dg.AssetKey(["analytics", pipeline, asset])

        def get_group_name(self, pipeline):
            return f"switchyard_{pipeline}"

        def get_tags(self, pipeline, asset):
            return {"team": "analytics"}

        def get_definition_name(self, pipeline, name):
            return f"analytics_{pipeline}_{name}"

    from switchyard.state_handoff.language.spec import Field, Pipeline, count

    flat = Pipeline(name="flat", key="key", event_time="event_time", event_id="event_id",
                    fields=(Field("event_id", "string", required=False), Field("key", "string"),
                            Field("event_time", "timestamp")), aggregations=(count("events"),))
    monkeypatch.setattr("switchyard.orchestration.scope.get_pipeline", {"flat": flat}.__getitem__)  # as if registered
    monkeypatch.setattr("switchyard.orchestration.scope.reference", lambda pipeline: pipeline.name)
    built = switchyard_definitions([PipelineDeployment("flat", first_day="2026-01-01", backfill_cron="0 3 * * *")],
                                   translator=Team())
    keys = {k.to_user_string() for k in built.resolve_all_asset_keys()}
    assert keys == {f"analytics/flat/{a}" for a in ("archive", "tiles", "state", "handoff", "stream")}
    graph = built.resolve_asset_graph()
    assert {graph.get(k).group_name for k in graph.get_all_asset_keys()} == {"switchyard_flat"}
    assert graph.get(dg.AssetKey(["analytics", "flat", "state"])).tags["team"] == "analytics"
    assert "windows_are_sound" not in {k.name for k in graph.asset_check_keys}
    assert built.resolve_schedule_def("analytics_flat_backfill_newest_day").cron_schedule == "0 3 * * *"
    days = built.resolve_job_def("analytics_flat_backfill_days").partitions_def
    assert days.get_first_partition_key() == "2026-01-01"


def test_the_factory_refuses_what_cannot_be_deployed_in_one_line():
    with pytest.raises(UserError, match="pipeline demo is deployed twice"):
        switchyard_definitions([PipelineDeployment("demo", "2026-01-01"), PipelineDeployment("demo", "2026-01-02")])
    with pytest.raises(UserError, match="unknown pipeline 'nope': choose one of demo, kinds"):
        switchyard_definitions([PipelineDeployment("nope", "2026-01-01")])
    with pytest.raises(UserError, match="pipeline demo: first_day '1/2/2026' is not a day: give it as YYYY-MM-DD"):
        PipelineDeployment("demo", "1/2/2026")
    with pytest.raises(UserError, match="name at least one pipeline"):
        switchyard_definitions([])


def test_a_kafka_secret_given_as_an_env_var_reaches_the_runs_clients(monkeypatch):
    """A team names its own variable for the SASL password (`dg.EnvVar`): the run's Kafka clients and object store
    (and the stream process it starts, handed `settings.overrides()`) use it; nothing but its name is configured,
    and nothing is written into the process's environment: after the run, nothing of it is left."""
    for name in ("SECURITY_PROTOCOL", "SASL_MECHANISM", "SASL_USERNAME", "SASL_PASSWORD", "SSL_CAFILE"):
        monkeypatch.setenv(f"SWITCHYARD_KAFKA_{name}", "")  # restored after the test; empty is unset
    monkeypatch.setenv("TEAM_KAFKA_PASSWORD", "s3cret-from-the-team")
    seen = {}

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TEAM_S3_SECRET", "team-s3-secret")

    @dg.asset
    def probe(kafka: KafkaResource, warehouse: WarehouseResource) -> None:
        from switchyard.state_handoff import settings
        from switchyard.state_handoff.io import storage
        from switchyard.state_handoff.io.kafka_security import from_env

        seen["security"], seen["s3"] = from_env(), storage.s3_credentials()
        seen["environ"] = {k: v for k, v in os.environ.items() if "s3cret" in v or v == "team-s3-secret"}
        seen["child"] = settings.overrides()
        seen["registry"] = settings.given("SWITCHYARD_SCHEMA_REGISTRY_URL"), settings.given(
            "SWITCHYARD_SCHEMA_REGISTRY_USER_INFO")

    kafka = KafkaResource(bootstrap="127.0.0.1:9", security_protocol="SASL_PLAINTEXT", sasl_mechanism="PLAIN",
                          sasl_username="team", sasl_password=dg.EnvVar("TEAM_KAFKA_PASSWORD"),
                          schema_registry_url="http://127.0.0.1:9/apis/ccompat/v7",
                          schema_registry_user_info=dg.EnvVar("TEAM_KAFKA_PASSWORD"))
    warehouse = WarehouseResource(warehouse="/tmp/unused", aws_access_key_id="team-key",
                                  aws_secret_access_key=dg.EnvVar("TEAM_S3_SECRET"))
    assert dg.materialize([probe], resources={"kafka": kafka, "warehouse": warehouse}).success
    assert (seen["security"].protocol, seen["security"].username, seen["security"].password) == (
        "SASL_PLAINTEXT", "team", "s3cret-from-the-team")
    assert seen["s3"] == ("team-key", "team-s3-secret", None)
    assert seen["registry"] == ("http://127.0.0.1:9/apis/ccompat/v7", "s3cret-from-the-team")
    assert seen["environ"] == {"TEAM_KAFKA_PASSWORD": "s3cret-from-the-team", "TEAM_S3_SECRET": "team-s3-secret"}, \
        "only the team's own variables hold the secrets: none was copied into the process's environment"
    assert seen["child"]["SWITCHYARD_KAFKA_SASL_PASSWORD"] == "s3cret-from-the-team", "the stream process is handed it"
    assert "s3cret" not in repr(kafka._get_non_default_public_field_values()), "the configuration names the variable"
    from switchyard.state_handoff.io import storage
    from switchyard.state_handoff.io.kafka_security import from_env
    assert from_env().protocol == "PLAINTEXT" and storage.s3_credentials() is None, "the run's settings left with it"

    seen.clear()
    monkeypatch.setenv("SWITCHYARD_KAFKA_SASL_USERNAME", "")
    monkeypatch.setenv("SWITCHYARD_KAFKA_SASL_PASSWORD", "")
    incomplete = KafkaResource(bootstrap="127.0.0.1:9", security_protocol="SASL_SSL", sasl_mechanism="PLAIN")
    failed = dg.materialize([probe], resources={"kafka": incomplete, "warehouse": warehouse}, raise_on_error=False)
    assert not failed.success and seen == {}, "refused before the step ran"
    init = next(e for e in failed.all_events if e.event_type_value == "RESOURCE_INIT_FAILURE")
    assert "SWITCHYARD_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs SWITCHYARD_KAFKA_SASL_USERNAME, " \
           "SWITCHYARD_KAFKA_SASL_PASSWORD in the environment" in str(init.event_specific_data.error)


def test_schedule_backfills_the_day_that_just_ended():
    schedule = defs.resolve_schedule_def("demo__backfill_newest_day")
    context = dg.build_schedule_context(scheduled_execution_time=datetime(2026, 1, 5, 0, 30, tzinfo=timezone.utc),
                                       repository_def=defs.get_repository_def())
    requests = schedule.evaluate_tick(context).run_requests
    assert [r.partition_key for r in requests] == ["2026-01-04"]
    assert schedule.job_name == "demo__backfill_days"
    early = dg.build_schedule_context(scheduled_execution_time=datetime(2025, 12, 31, 0, 30, tzinfo=timezone.utc),
                                      repository_def=defs.get_repository_def())
    assert "2025-12-30 is before the first daily partition (2025-12-31)" in schedule.evaluate_tick(early).skip_message


def test_switchyard_composes_into_a_teams_project_with_its_own_spark_executor_and_two_components(tmp_path):
    """A team's code location: its own `spark` resource and asset, a multiprocess executor, and two switchyard
    Components (two pipelines, two warehouses, two Kafka clusters). It loads: switchyard's resources sit under
    their own keys, built once and bound to the same objects by both Components; the team's executor is the code
    location's, switchyard's own jobs run in one process; each pipeline's tables are under its Component's
    warehouse; loading switchyard left no process-wide warning filter behind."""
    import warnings

    from switchyard.orchestration.component import SwitchyardComponent
    from switchyard.orchestration.scope import Scope

    class TeamSpark(dg.ConfigurableResource):
        app: str = "team"

    @dg.asset
    def team_table(spark: TeamSpark) -> None:
        pass

    team_spark = TeamSpark()
    team = dg.Definitions(assets=[team_table], resources={"spark": team_spark}, executor=dg.multiprocess_executor)
    east = SwitchyardComponent(pipelines=[{"pipeline": "demo", "first_day": "2026-01-01"}],
                               warehouse=str(tmp_path / "east"), bootstrap="127.0.0.1:19092")
    west = SwitchyardComponent(pipelines=[{"pipeline": "kinds", "first_day": "2026-01-01"}],
                               warehouse=str(tmp_path / "west"), bootstrap="127.0.0.1:29092")
    merged = dg.Definitions.merge(team, east.build_defs(None), west.build_defs(None))
    dg.Definitions.validate_loadable(merged)
    assert merged.resources["spark"] is team_spark and merged.executor is dg.multiprocess_executor
    assert {"switchyard_spark", "switchyard_kafka", "switchyard_warehouse", "switchyard_monitor"} <= set(
        merged.resources)
    for job in ("demo__backfill_then_stream", "kinds__rebase_stream", "demo__stop_stream", "kinds__backfill_days"):
        assert merged.resolve_job_def(job).executor_def is dg.in_process_executor, job
    assert Scope(PipelineDeployment("demo", "2026-01-01", warehouse=str(tmp_path / "east"))).tables(
        merged.resources["switchyard_warehouse"]).root == str(tmp_path / "east" / "demo")
    assert not [f for f in warnings.filters if f[2] is dg.BetaWarning], "a filter silences Dagster's beta warnings"


def test_a_pipeline_object_is_deployed_and_its_stream_process_finds_it_by_reference():
    """A `Pipeline` object passed to the factory (or named `module:NAME` in a Component's YAML) gets its asset group;
    the stream process Dagster starts is given `--pipeline module:NAME`, which the command line resolves to the same
    object. One declared where no module holds it is refused in one line as the code location loads."""
    from switchyard.orchestration.component import SwitchyardComponent
    from switchyard.orchestration.scope import Scope
    from switchyard.orchestration.stream_launch import StreamConfig, command

    built = switchyard_definitions([PipelineDeployment(ORDERS, "2026-01-01"), PipelineDeployment("demo", "2026-01-01")])
    assert {"orders_object/tiles", "orders_object/stream", "demo/stream"} <= {
        k.to_user_string() for k in built.resolve_all_asset_keys()}
    deployed = Scope(PipelineDeployment(ORDERS, "2026-01-01"))
    assert deployed.reference == f"{__name__}:ORDERS"
    launched = command(StreamConfig(), Tables("/warehouse", ORDERS.name), "127.0.0.1:9", deployed.reference)
    assert launched[launched.index("--pipeline") + 1] == f"{__name__}:ORDERS"
    assert get_pipeline(f"{__name__}:ORDERS") is ORDERS
    assert Scope(PipelineDeployment("demo", "2026-01-01")).reference == "demo"  # a registered one: by its name

    by_yaml = SwitchyardComponent(pipelines=[{"pipeline": f"{__name__}:ORDERS", "first_day": "2026-01-01"}])
    assert "orders_object/stream" in {k.to_user_string() for k in by_yaml.build_defs(None).resolve_all_asset_keys()}
    nowhere = dataclasses.replace(ORDERS, name="nowhere")
    with pytest.raises(UserError, match=r"^pipeline nowhere is neither registered nor held at the top level of an "
                                        r"importable module, so the stream process cannot find it: "):
        switchyard_definitions([PipelineDeployment(nowhere, "2026-01-01")])
    with pytest.raises(UserError, match=rf"^pipeline {__name__}:NOPE: module {__name__} has no NOPE$"):
        get_pipeline(f"{__name__}:NOPE")


def test_dagster_deprecations_from_project_code_fail_the_tests():
    with pytest.raises(DeprecationWarning, match="RunRequest\\(partition_key=...\\)"):
        defs.resolve_job_def("demo__backfill_days").run_request_for_partition("2026-01-04")


def test_the_chain_runs_from_archive_to_a_caught_up_stream(spark, backlog, tables, bootstrap, instance):
    job = definitions(resources(tables, bootstrap), "demo", "kinds").resolve_job_def("demo__backfill_then_stream")
    result = job.execute_in_process(tags=RANGE, instance=instance)
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
    committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
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
                           "handoff_is_contiguous", "archive_within_retention", *STREAM_CHECKS}
    assert all(c.passed for c in checks.values()), {n: c.description for n, c in checks.items()}

    # after the switch the keyed state holds every well-formed record of the topic, backlog and tail alike
    expected = oracle.backlog(oracle.read_topic(bootstrap, TOPIC)).state
    state_rows = spark.read.format("delta").load(tables.state).collect()
    assert {r.key: (r.event_count, r.amount_min, r.amount_max) for r in state_rows} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.items()}

    # the schedule's backfill of a day once a stream has run: a rebase at a cut, never an overwrite under it
    rerun = definitions(resources(tables, bootstrap)).resolve_job_def("demo__backfill_days") \
        .execute_in_process(partition_key=DAYS[-1])
    assert rerun.success
    rebased = _materializations(rerun)["tiles"][0].metadata
    assert rebased["rebased"].value is True and rebased["reconciliation_keys_different"].value == 0
    assert rebased["handoff_id"].value != switch["handoff_id"].value
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED).handoff_id == rebased["handoff_id"].value
    state_rows = spark.read.format("delta").load(tables.state).collect()
    assert {r.key: (r.event_count, r.amount_min, r.amount_max) for r in state_rows} == {
        k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.items()}

    # the handoff gate fails, naming the expectation, when a start offset leaves a gap after the archive
    start = {p: hi + 1 if p == 0 else hi for p, (_, hi) in backlog.cut.items()}
    outcomes = run_suite(handoff_offsets(spark, tables, start, bootstrap), "handoff", HANDOFF_EXPECTATIONS)
    failed = {o.expectation: o.unexpected_rows for o in outcomes if not o.passed}
    assert failed == {"expect_column_pair_values_to_be_equal(start_offset, archive_end)": 1}


@pytest.fixture(scope="module")
def instance():
    """One Dagster instance for the module's runs of both pipelines."""
    with dg.DagsterInstance.ephemeral() as shared:
        yield shared


def test_the_second_pipeline_runs_its_own_chain_beside_demo(spark, backlog, bootstrap, tmp_path, instance):
    """`kinds` (another key, a mean, quarter-hour windows) over the same topic, from the same code location and
    instance as demo: its backfill, handoff, stream and checks, matching the oracle record for record."""
    kinds = get_pipeline("kinds")
    tables = Tables(str(tmp_path / "warehouse"), kinds.name)
    run_archive(spark, kinds, tables, bootstrap, TOPIC, backlog.cut, out=_quiet)
    demo_tables = Tables(tables.warehouse, PIPELINE.name)
    built = definitions(resources(tables, bootstrap), "demo", "kinds")
    result = built.resolve_job_def("kinds__backfill_then_stream").execute_in_process(tags=RANGE, instance=instance)
    assert result.success
    assert not os.path.exists(demo_tables.handoffs), "nothing of demo's is touched"

    done = _materializations(result)
    assert {m.asset_key.path[0] for ms in done.values() for m in ms} == {"kinds"}
    tiles = done["tiles"][0].metadata
    assert tiles["records_read"].value == sum(hi - lo for lo, hi in backlog.cut.values())
    assert tiles["well_formed"].value + tiles["dead_lettered"].value == tiles["records_read"].value
    checks = _check_evaluations(result)
    assert set(checks) == {"tiles_are_sound", "state_is_sound", "windows_are_sound", "window_state_is_sound",
                           "handoff_is_contiguous", "archive_within_retention", *STREAM_CHECKS}
    assert all(c.passed for c in checks.values()), {n: c.description for n, c in checks.items()}
    assert instance.get_latest_materialization_event(dg.AssetKey(["kinds", "stream"])) is not None

    records = oracle.read_topic(bootstrap, TOPIC)
    expected, malformed = oracle.by_kind(records)
    state = {r.kind: r for r in spark.read.format("delta").load(tables.state).collect()}
    assert set(state) == set(expected) and len(expected) >= 5
    for kind, want in expected.items():
        got = state[kind]
        assert (got.events, got.amount_max, got.last_seen) == (want.events, want.amount_max, want.last_seen), kind
        # a mean is kept as its mergeable parts, sum and count
        assert got.amount_mean__count == want.events, kind
        assert got.amount_mean__sum / got.amount_mean__count == pytest.approx(want.amount_mean, rel=1e-9), kind
    # every record aggregated or dead-lettered; every aggregated one in a window or late
    dead = spark.read.format("delta").load(tables.dead_letter).count()
    assert sum(w.events for w in expected.values()) + malformed == len(records)
    assert dead == malformed, "the backlog's and the stream's dead letters together"
    windowed = sum(spark.read.format("delta").load(tables.path(t)).agg(F.sum("events")).first()[0] or 0
                   for t in ("windows", "window_state"))
    late = spark.read.format("delta").load(tables.late).count()
    assert windowed + late == sum(w.events for w in expected.values())
    ends = {r.window_end - r.window_start for r in spark.read.format("delta").load(tables.windows).collect()}
    assert ends == {timedelta(minutes=15)}

    # its own schedule's job, once it has streamed: a rebase at a cut of kinds alone, reconciled
    rerun = built.resolve_job_def("kinds__backfill_days").execute_in_process(partition_key=DAYS[-1],
                                                                             instance=instance)
    assert rerun.success
    rebased = _materializations(rerun)["tiles"][0].metadata
    assert rebased["rebased"].value is True and rebased["reconciliation_keys_different"].value == 0
    assert not os.path.exists(demo_tables.handoffs)


def test_failing_state_expectation_blocks_the_handoff(spark, bootstrap, tables):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    bad_tile = (spark.read.format("delta").load(tables.tiles).limit(1)
                .withColumn("key", F.lit("tampered")).withColumn("amount_min", F.lit(5.0))
                .withColumn("amount_max", F.lit(1.0)))
    bad_tile.write.format("delta").mode("append").partitionBy("event_date").save(tables.tiles)

    built = definitions(resources(tables, bootstrap))
    result = dg.materialize([asset(built, "state"), checks_def(built, "state_is_sound"), asset(built, "handoff")],
                            resources=resources(tables, bootstrap), raise_on_error=False)
    assert not result.success
    check = _check_evaluations(result)["state_is_sound"]
    assert not check.passed
    assert check.metadata["failed_expectations"].value == "expect_column_pair_values_a_to_be_greater_than_b(amount_max, amount_min)"
    assert check.metadata["unexpected_rows"].value == 1
    assert "handoff" not in _materializations(result)
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED) is None


def test_backfill_assets_are_refused_while_another_actor_owns_the_pipeline(spark, bootstrap, tables):
    """Every writer holds the lease: a Dagster backfill racing a CLI stream (here this process holding the
    pipeline as `switchyard stream`) fails in one line naming the owner, and writes nothing to any table."""
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    written = (tables.tiles, tables.state, tables.windows, tables.window_state, tables.handoffs)
    before = {path: sorted(DeltaTable(path).file_uris()) for path in written}
    built = definitions(resources(tables, bootstrap))
    with lease.hold(tables, lease.STREAM):
        for assets, partition in (([asset(built, "tiles")], DAYS[1]), ([asset(built, "state")], None)):
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


def test_dg_lists_the_component(tmp_path):
    """The installed package registers its Component with `dg`: `dg list components` lists it (and so `dg scaffold
    defs` can make one)."""
    import json
    import subprocess
    import sys

    dg_cli = os.path.join(os.path.dirname(sys.executable), "dg")
    listed = subprocess.run([dg_cli, "list", "components", "--json"], cwd=tmp_path, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr[-2000:]
    keys = {item["key"] for item in json.loads(listed.stdout)["items"]}
    assert "switchyard.orchestration.component.SwitchyardComponent" in keys, sorted(keys)
