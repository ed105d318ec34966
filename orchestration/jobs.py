"""Jobs over the asset graph (the whole chain; the backfill of days alone, what the schedule runs) and the jobs
that steer a live stream from the UI: rebase it at a cut, stop it."""

import dagster as dg

from orchestration.errors import user_errors_as_failures
from orchestration.resources import KafkaResource, SparkResource, WarehouseResource
from orchestration.stream_health import is_observed, transition_metadata
from state_handoff import handoff_log

BACKFILL = ["archive", "tiles", "state", "windows", "window_state"]

backfill_then_stream = dg.define_asset_job(
    "backfill_then_stream",
    selection=dg.AssetSelection.assets(*BACKFILL, "handoff", "stream"),
    description="Observe the archive, backfill the chosen days, commit the state, hand off and stream.",
)

backfill_days = dg.define_asset_job(
    "backfill_days",
    selection=dg.AssetSelection.assets(*BACKFILL),
    description="Observe the archive, backfill the chosen days into tiles and commit the keyed state and windows.",
)


def _observe_since(context: dg.OpExecutionContext, tables, seq: int) -> None:
    """Each log entry after `seq` (the rebase's request, pause, handoff at the cut, ...) as an observation of
    `stream`."""
    for entry in handoff_log.entries(None, tables):
        if entry.seq > seq and is_observed(entry):
            context.log_event(dg.AssetObservation(asset_key="stream", metadata=transition_metadata(entry, tables)))


class RebaseConfig(dg.Config):
    """accept_differences: replace the streamed state at the cut even where the recomputed one differs."""

    accept_differences: bool = False


@dg.op
def rebase_at_a_cut(context: dg.OpExecutionContext, config: RebaseConfig, spark: SparkResource,
                    kafka: KafkaResource, warehouse: WarehouseResource) -> None:
    """Rebase the pipeline at a cut: the live stream pauses, its state is recomputed sort-based up to the cut,
    reconciled, handed off there and resumed; with no stream running, this run rebases it."""
    from jobs.rebase import rebase_pipeline

    tables = warehouse.tables()
    seq = max([-1] + [e.seq for e in handoff_log.entries(None, tables)])
    with user_errors_as_failures():
        new = rebase_pipeline(warehouse.spec(), tables, kafka.bootstrap, "rebase", "dagster rebase_stream",
                              spark.session, accept_differences=config.accept_differences, out=context.log.info)
    context.log.info(f"rebased at the cut: handoff {new.handoff_id}")
    _observe_since(context, tables, seq)


@dg.op
def stop_the_stream(context: dg.OpExecutionContext, warehouse: WarehouseResource) -> None:
    """Stop the pipeline's running stream cleanly, wherever it runs (a STOP_REQUESTED in its handoff log: it drains
    its queries and logs STOPPED)."""
    from jobs.stop import stop_stream

    tables = warehouse.tables()
    seq = max([-1] + [e.seq for e in handoff_log.entries(None, tables)])
    with user_errors_as_failures():
        stopped = stop_stream(tables, out=context.log.info, requested_by="dagster stop_stream")
    _observe_since(context, tables, seq)
    if stopped is None:
        raise dg.Failure(description="the stream ended without STOPPED: it failed on the way out (see the "
                                     "handoff log and the stream's process.log)", allow_retries=False)


@dg.job(description="Rebase the live stream at a cut now (stream -> backlog -> stream, reconciled).")
def rebase_stream():
    rebase_at_a_cut()


@dg.job(description="Stop the live stream cleanly.")
def stop_stream():
    stop_the_stream()


defs = dg.Definitions(jobs=[backfill_then_stream, backfill_days, rebase_stream, stop_stream])
