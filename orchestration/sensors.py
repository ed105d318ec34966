"""A pipeline's `stream_health` sensor: each handoff log transition and each new progress of the stream as an
observation of its `stream` asset, and its health checks re-evaluated whenever a verdict changes."""

import time

import dagster as dg

from switchyard.orchestration.resources import KafkaResource, StreamMonitorResource, WarehouseResource
from switchyard.orchestration.scope import Scope
from switchyard.orchestration.stream_health import (LATENCY, Watch, advance, check_evaluation, health_evaluation,
                                                    is_observed, problem, progress_from, sample_latency,
                                                    transition_metadata, verdicts)
from switchyard.state_handoff.control.view import PipelineView


def evaluate(context: dg.SensorEvaluationContext, scope: Scope, warehouse: WarehouseResource, kafka: KafkaResource,
             monitor: StreamMonitorResource) -> dg.SensorResult | dg.SkipReason:
    """Observe the stream's lag, rates, update latency and watermark delay on every progress, and each transition
    and rebase as it is logged; evaluate the stream's health checks whenever one changes verdict."""
    tables, stream = scope.tables(warehouse), scope.key("stream")
    view = PipelineView.read(tables)
    entries = view.entries
    progress = progress_from(view)
    if progress is None:
        return dg.SkipReason("no handoff yet: nothing streams")
    now = time.time()
    previous = Watch.from_cursor(context.cursor)
    watch = advance(previous, progress, now)
    new_handoff = progress.handoff_id != previous.handoff_id
    new_progress = new_handoff or progress.updated != previous.updated
    if new_progress:
        sample_latency(progress, scope.bootstrap(kafka), scope.spec, tables)
    events: list = [dg.AssetObservation(asset_key=stream, metadata=transition_metadata(e, tables))
                    for e in entries if e.seq > previous.log_seq and is_observed(e)]
    watch.log_seq = max([previous.log_seq] + [e.seq for e in entries])
    if new_progress:
        events.append(dg.AssetObservation(asset_key=stream, metadata=progress.metadata(now)))
    watch.problem = problem(progress, watch, now, monitor.stall_seconds, monitor.max_offsets_behind)
    if new_handoff or watch.problem != previous.problem:
        events.append(health_evaluation(progress, watch.problem, now, stream))
    for verdict in verdicts(progress, monitor):
        sampled = verdict.check_name != LATENCY or new_progress  # latency is sampled on new progress only
        if sampled and (new_progress or previous.verdicts.get(verdict.check_name) != verdict.passed):
            events.append(check_evaluation(progress, verdict, now, stream))
            watch.verdicts[verdict.check_name] = verdict.passed
    if not events:
        return dg.SensorResult(skip_reason=f"no new progress (stream {progress.status.lower()})",
                               cursor=watch.to_cursor())
    return dg.SensorResult(asset_events=events, cursor=watch.to_cursor())


def build(scope: Scope) -> dg.Definitions:
    status = dg.DefaultSensorStatus.RUNNING if scope.deployment.sensor_running else dg.DefaultSensorStatus.STOPPED

    @dg.sensor(name=scope.name("stream_health"), minimum_interval_seconds=30, default_status=status,
               description=f"Pipeline {scope.pipeline}: the stream's progress, transitions and health checks.")
    def stream_health(context: dg.SensorEvaluationContext, switchyard_warehouse: WarehouseResource,
                      switchyard_kafka: KafkaResource,
                      switchyard_monitor: StreamMonitorResource) -> dg.SensorResult | dg.SkipReason:
        return evaluate(context, scope, switchyard_warehouse, switchyard_kafka, switchyard_monitor)

    return dg.Definitions(sensors=[stream_health])
