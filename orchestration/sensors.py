"""Watchers of the batch → stream transition."""

import time

import dagster as dg

from orchestration.resources import StreamMonitorResource, WarehouseResource
from orchestration.stream_health import Watch, advance, health_evaluation, problem, read_progress


@dg.sensor(minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def stream_health(context: dg.SensorEvaluationContext, warehouse: WarehouseResource,
                  monitor: StreamMonitorResource) -> dg.SensorResult | dg.SkipReason:
    """Observe the stream's lag, rates and watermark delay on every progress; fail stream_is_healthy when it stalls
    or falls behind, and pass it again when it recovers."""
    progress = read_progress(warehouse.tables())
    if progress is None:
        return dg.SkipReason("no handoff yet: nothing streams")
    now = time.time()
    previous = Watch.from_cursor(context.cursor)
    watch = advance(previous, progress, now)
    watch.problem = problem(progress, watch, now, monitor.stall_seconds, monitor.max_offsets_behind)
    new_handoff = progress.handoff_id != previous.handoff_id
    events = []
    if new_handoff or progress.updated != previous.updated:
        events.append(dg.AssetObservation(asset_key="stream", metadata=progress.metadata(now)))
    if new_handoff or watch.problem != previous.problem:
        events.append(health_evaluation(progress, watch.problem, now))
    if not events:
        return dg.SensorResult(skip_reason=f"no new progress (stream {progress.status.lower()})",
                               cursor=watch.to_cursor())
    return dg.SensorResult(asset_events=events, cursor=watch.to_cursor())


defs = dg.Definitions(sensors=[stream_health])
