"""A pipeline's jobs over its asset graph (the whole chain; the backfill of days alone, what the schedule runs) and
the jobs that steer its live stream from the UI: start it under `switchyard serve`, rebase it at a cut, redeploy a
changed definition at a cut, stop it.
Each steering job appends a request to the pipeline's handoff log, which the stream (or the service) reads
wherever it runs."""

from typing import TYPE_CHECKING

import dagster as dg

from switchyard.orchestration.errors import user_errors_as_failures
from switchyard.orchestration.resources import KafkaResource, SparkResource, WarehouseResource
from switchyard.orchestration.scope import Scope

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition
from switchyard.orchestration.stream_health import is_observed, transition_metadata
from switchyard.state_handoff.control import pins as pipeline_settings
from switchyard.state_handoff.control.view import PipelineView


def _observe_since(context: dg.OpExecutionContext, scope: Scope, tables, seq: int) -> None:
    """Each log entry after `seq` (the rebase's request, pause, handoff at the cut, ...) as an observation of the
    pipeline's `stream`."""
    for entry in PipelineView.read(tables).entries:
        if entry.seq > seq and is_observed(entry):
            context.log_event(dg.AssetObservation(asset_key=scope.key("stream"),
                                                  metadata=transition_metadata(entry, tables)))


def _last_seq(tables) -> int:
    return PipelineView.read(tables).last_seq


class RebaseConfig(dg.Config):
    """accept_differences: replace the streamed state at the cut even where the recomputed one differs."""

    accept_differences: bool = False


class RedeployConfig(RebaseConfig):
    """rollback: this code location's definition is the one the newest redeploy replaced; its kept tiles are restored
    at the cut (`switchyard rollback`) instead of tiled again."""

    rollback: bool = False


def _rebase(context: dg.OpExecutionContext, scope: Scope, config: RebaseConfig, spark: SparkResource,
            kafka: KafkaResource, warehouse: WarehouseResource) -> None:
    from switchyard.jobs.rebase.run import rebase_pipeline
    from switchyard.jobs.stream import stream_until_caught_up

    tables = scope.tables(warehouse)
    seq = _last_seq(tables)
    with user_errors_as_failures():
        pipeline_settings.settle(tables, "dagster rebase_stream", adopt=False, pipeline=scope.spec)
        new = rebase_pipeline(scope.spec, tables, scope.bootstrap(kafka), "rebase", "dagster rebase_stream",
                              spark.session, accept_differences=config.accept_differences,
                              finish_stream=stream_until_caught_up(scope.spec, tables, scope.bootstrap(kafka),
                                                                   out=context.log.info),
                              out=context.log.info)
    context.log.info(f"rebased at the cut: handoff {new.handoff_id}")
    _observe_since(context, scope, tables, seq)


def _redeploy(context: dg.OpExecutionContext, scope: Scope, config: RedeployConfig, spark: SparkResource,
              kafka: KafkaResource, warehouse: WarehouseResource) -> None:
    from switchyard.jobs.rebase.redeploy import redeploy_pipeline

    tables = scope.tables(warehouse)
    seq = _last_seq(tables)
    with user_errors_as_failures():
        pipeline_settings.settle(tables, "dagster redeploy_stream", adopt=False)
        new = redeploy_pipeline(scope.spec, tables, scope.bootstrap(kafka), spark.session,
                                accept_differences=config.accept_differences, rollback=config.rollback,
                                out=context.log.info)
    context.log.info(f"redeployed at the cut: handoff {new.handoff_id}; start the stream (start_stream, or "
                     "`switchyard stream`) under this definition")
    _observe_since(context, scope, tables, seq)


def _stop(context: dg.OpExecutionContext, scope: Scope, warehouse: WarehouseResource) -> None:
    from switchyard.jobs.stop import stop_stream

    tables = scope.tables(warehouse)
    seq = _last_seq(tables)
    with user_errors_as_failures():
        stopped = stop_stream(tables, out=context.log.info, requested_by="dagster stop_stream")
    _observe_since(context, scope, tables, seq)
    if stopped is None:
        raise dg.Failure(description="the stream ended without STOPPED: it failed on the way out (see the "
                                     "handoff log and the stream's process.log)", allow_retries=False)


class StartConfig(dg.Config):
    """timeout_s: how long to wait for `switchyard serve` to start the stream."""

    timeout_s: float = 300.0


def _start(context: dg.OpExecutionContext, scope: Scope, config: StartConfig, warehouse: WarehouseResource) -> None:
    from switchyard.jobs.start import start_served

    tables = scope.tables(warehouse)
    seq = _last_seq(tables)
    with user_errors_as_failures():
        start_served(tables, f"dagster {scope.name('start_stream')}", config.timeout_s, out=context.log.info)
    _observe_since(context, scope, tables, seq)


# switchyard's jobs run in one process, so that every step shares the run's one SparkSession (a JVM per step costs
# minutes on a small machine); the code location's default executor is the project's to choose.
ONE_PROCESS = dg.in_process_executor


def build(scope: Scope) -> tuple[dg.Definitions, "UnresolvedAssetJobDefinition"]:
    """The pipeline's jobs, and its `backfill_days` job (what its schedule runs)."""
    backlog = [scope.key(name) for name in scope.backlog_assets]
    backfill_then_stream = dg.define_asset_job(
        scope.name("backfill_then_stream"), executor_def=ONE_PROCESS,
        selection=dg.AssetSelection.assets(*backlog, scope.key("handoff"), scope.key("stream")),
        description=f"Pipeline {scope.pipeline}: observe the archive, backfill the chosen days, commit the state, "
                    "hand off and stream.")
    backfill_days = dg.define_asset_job(
        scope.name("backfill_days"), selection=dg.AssetSelection.assets(*backlog), executor_def=ONE_PROCESS,
        description=f"Pipeline {scope.pipeline}: observe the archive, backfill the chosen days into tiles and commit "
                    "the keyed state and windows.")

    @dg.op(name=scope.name("rebase_at_a_cut"))
    def rebase_at_a_cut(context: dg.OpExecutionContext, config: RebaseConfig, switchyard_spark: SparkResource,
                        switchyard_kafka: KafkaResource, switchyard_warehouse: WarehouseResource) -> None:
        """Rebase the pipeline at a cut: the live stream pauses, its state is recomputed sort-based up to the cut,
        reconciled, handed off there and resumed; with no stream running, this run rebases it."""
        _rebase(context, scope, config, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    @dg.op(name=scope.name("redeploy_at_a_cut"))
    def redeploy_at_a_cut(context: dg.OpExecutionContext, config: RedeployConfig, switchyard_spark: SparkResource,
                          switchyard_kafka: KafkaResource, switchyard_warehouse: WarehouseResource) -> None:
        """Switch this code location's definition of the pipeline in at a cut (jobs/rebase/redeploy.py): its history tiled
        beside the live stream, the stream stopped, the state recomputed at the cut, reconciled on the aggregations
        both definitions declare alike, and handed off there (`rollback`: back to the definition it replaced, its
        kept tiles restored)."""
        _redeploy(context, scope, config, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    @dg.op(name=scope.name("stop_the_stream"))
    def stop_the_stream(context: dg.OpExecutionContext, switchyard_warehouse: WarehouseResource) -> None:
        """Stop the pipeline's running stream cleanly, wherever it runs (a STOP_REQUESTED in its handoff log: it
        drains its queries and logs STOPPED)."""
        _stop(context, scope, switchyard_warehouse)

    @dg.op(name=scope.name("start_the_stream"))
    def start_the_stream(context: dg.OpExecutionContext, config: StartConfig,
                         switchyard_warehouse: WarehouseResource) -> None:
        """Ask `switchyard serve` to run the pipeline's stream (a START_REQUESTED in its handoff log: it lifts a stop
        request or a hold-down) and wait until it runs; the run ends, the stream lives on under the service."""
        _start(context, scope, config, switchyard_warehouse)

    @dg.job(name=scope.name("start_stream"), executor_def=ONE_PROCESS,
            description=f"Pipeline {scope.pipeline}: ask the service (`switchyard serve`) to run the stream.")
    def start_stream():
        start_the_stream()

    @dg.job(name=scope.name("rebase_stream"), executor_def=ONE_PROCESS,
            description=f"Pipeline {scope.pipeline}: rebase the live stream at a cut now (stream -> backlog -> "
                        "stream, reconciled).")
    def rebase_stream():
        rebase_at_a_cut()

    @dg.job(name=scope.name("redeploy_stream"), executor_def=ONE_PROCESS,
            description=f"Pipeline {scope.pipeline}: switch this code location's changed definition in at a cut.")
    def redeploy_stream():
        redeploy_at_a_cut()

    @dg.job(name=scope.name("stop_stream"), executor_def=ONE_PROCESS,
            description=f"Pipeline {scope.pipeline}: stop the live stream cleanly.")
    def stop_stream():
        stop_the_stream()

    return (dg.Definitions(jobs=[backfill_then_stream, backfill_days, start_stream, rebase_stream, redeploy_stream,
                                    stop_stream]),
            backfill_days)
