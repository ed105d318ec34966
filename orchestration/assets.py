"""A pipeline as assets: archive → daily tiles → keyed state and windows (→ handoff → stream), built per pipeline
from its `Scope`."""

import hashlib
import json
from datetime import datetime, timedelta

import dagster as dg
from pydantic import Field

from switchyard.jobs.backfill import backfill_tiles, commit_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.orchestration.errors import user_errors_as_failures
from switchyard.orchestration.partitions import days_of
from switchyard.orchestration.resources import KafkaResource, SparkResource, WarehouseResource
from switchyard.orchestration.scope import Scope
from switchyard.orchestration.stream_health import recorded_figures
from switchyard.orchestration.stream_launch import StreamConfig, launch_and_watch
from switchyard.state_handoff.clock import as_utc
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control import pins as pipeline_settings
from switchyard.state_handoff.control.handoffs import current_handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.archive_files import archive_meta, list_archive
from switchyard.state_handoff.language import definition

# Each asset that writes holds the pipeline's lease under its own name, as the CLI's commands do: a second actor
# (a CLI stream, another run) is refused in one line naming the owner, before anything is written.
TILES_OWNER = "dagster asset tiles"
KEYED_STATE_OWNER = "dagster asset keyed_state"
HANDOFF_OWNER = "dagster asset handoff"
# The schedule commits the state every day at 00:30 UTC: a day and a half without it is a missed backfill.
STATE_FRESHNESS = dg.FreshnessPolicy.time_window(fail_window=timedelta(hours=36), warn_window=timedelta(hours=26))


def _timestamp(value: datetime | None):
    """A naive UTC time of the log as Dagster's timestamp metadata."""
    return dg.MetadataValue.timestamp(as_utc(value)) if value else dg.MetadataValue.null()



def _archive(tables) -> dg.ObserveResult:
    with user_errors_as_failures():
        files = list_archive(tables.archive)
        meta = archive_meta(tables.archive)
    days = sorted({f.day for f in files})
    fingerprint = json.dumps({"meta": meta, "files": [f.path for f in files]}, sort_keys=True)
    return dg.ObserveResult(
        data_version=dg.DataVersion(hashlib.sha256(fingerprint.encode()).hexdigest()[:16]),
        metadata={
            "topic": meta["topic"],
            "records": meta["records"],
            "files": len(files),
            "days": len(days),
            "first_day": str(days[0]) if days else "",
            "last_day": str(days[-1]) if days else "",
            "first_offsets": dg.MetadataValue.json(meta["first"]),
            "end_offsets": dg.MetadataValue.json(meta["cut"]),
            "path": dg.MetadataValue.path(tables.archive),
        })


class TilesConfig(dg.Config):
    accept_differences: bool = Field(False, description=(
        "When the backfill rebases a live pipeline at a cut: replace the streamed state there even where the "
        "recomputed one differs (`switchyard rebase --accept-differences`). Without it such a difference stops the "
        "rebase, the stream keeps serving, and the run fails naming the differing keys."))


def _tiles(context: dg.AssetExecutionContext, scope: Scope, config: TilesConfig, spark: SparkResource,
           kafka: KafkaResource, warehouse: WarehouseResource) -> dg.MaterializeResult:
    first, last = days_of(context.partition_time_window)
    tables = scope.tables(warehouse)
    if current_handoff(tables) is not None:  # a stream's history exists: the backfill rebases at a cut
        return _rebased(context, scope, spark, kafka, tables, str(first), str(last), config.accept_differences)
    with user_errors_as_failures(), lease.hold(tables, TILES_OWNER):
        pipeline_settings.settle(tables, TILES_OWNER, record=True, adopt=False, pipeline=scope.spec)
        run = backfill_tiles(spark.session(), scope.spec, tables, str(first), str(last), out=context.log.info)
    if run.handoff_id is None:
        context.log.info(run.message)
    return dg.MaterializeResult(metadata={
        "days": f"{first}..{last}",
        "handoff_id": run.handoff_id or "",
        "records_read": run.records_read,
        "well_formed": run.well_formed,
        "dead_lettered": run.dead_lettered,
        "accounting": dg.MetadataValue.json({str(p): a for p, a in run.accounting.items()}),
        "skipped_files": dg.MetadataValue.json(run.skipped_files),
        "seconds": round(run.seconds, 3),
        "records_per_s": round(run.records_read / run.seconds) if run.seconds else 0,
    })


def _rebased(context, scope: Scope, spark: SparkResource, kafka: KafkaResource, tables, first: str, last: str,
             accept_differences: bool) -> dg.MaterializeResult:
    """The days re-tiled inside a rebase at a cut: through the live stream when one runs (it pauses, rebases and
    resumes), else in this run; the live tables are never overwritten under a stream."""
    from switchyard.jobs.rebase.run import rebase_pipeline
    from switchyard.jobs.stream import stream_until_caught_up

    with user_errors_as_failures():
        pipeline_settings.settle(tables, "dagster backfill", adopt=False, pipeline=scope.spec)
        new = rebase_pipeline(scope.spec, tables, scope.bootstrap(kafka), "backfill", "dagster backfill",
                              spark.session, days=(first, last), accept_differences=accept_differences,
                              finish_stream=stream_until_caught_up(scope.spec, tables, scope.bootstrap(kafka),
                                                                   out=context.log.info),
                              out=context.log.info)
    committed = details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED, handoff_id=new.handoff_id))
    reconciliation = committed.reconciliation or {}
    return dg.MaterializeResult(metadata={
        "days": f"{first}..{last}",
        "handoff_id": new.handoff_id,
        "rebased": True,
        "cut": dg.MetadataValue.json({str(p): o for p, o in sorted(new.start_offsets.items())}),
        "reconciliation_keys_different": reconciliation.get("keys_different", 0),
        "reconciliation_keys": reconciliation.get("keys_recomputed", 0),
        "rebase_seconds": committed.rebase_s or 0.0,
    })


class KeyedStateConfig(dg.Config):
    kafka_tail: bool = Field(False, description=(
        "Also aggregate the archived topic's records after the archive, up to its end now, in batch "
        "(`switchyard backfill --kafka-tail`): the handoff then starts the stream there, with no backlog to stream."))


def _keyed_state(context: dg.AssetExecutionContext, scope: Scope, config: KeyedStateConfig, spark: SparkResource,
                 warehouse: WarehouseResource, kafka: KafkaResource):
    session, pipeline, tables = spark.session(), scope.spec, scope.tables(warehouse)
    windows = ("windows", "window_state") if scope.windowed else ()
    if current_handoff(tables) is not None:  # the rebase in `tiles` committed the state at its cut
        latest = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
        context.log.info(f"state committed by the rebase of backfill {latest.handoff_id}; nothing to merge")
        yield dg.MaterializeResult(asset_key=scope.key("state"), metadata={
            "handoff_id": latest.handoff_id, "state_version": latest.state_version,
            "keys": details.of(latest).keys or 0, "rebased": True,
            "path": dg.MetadataValue.path(tables.state)})
        for name in windows:
            yield dg.MaterializeResult(asset_key=scope.key(name),
                                       metadata={"rebased": True, "path": dg.MetadataValue.path(tables.path(name))})
        return
    with user_errors_as_failures(), lease.hold(tables, KEYED_STATE_OWNER):
        pipeline_settings.settle(tables, KEYED_STATE_OWNER, record=True, adopt=False, pipeline=pipeline)
        run = commit_backfill(session, pipeline, tables, out=context.log.info,
                              kafka_tail_from=scope.bootstrap(kafka) if config.kafka_tail else None)
    committed = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED))
    yield dg.MaterializeResult(asset_key=scope.key("state"), metadata={
        "handoff_id": run.handoff_id,
        "state_version": run.state_version,
        "keys": run.keys,
        "dagster/row_count": run.keys,
        "backlog_watermark": _timestamp(run.backlog_watermark),
        "complete": bool(committed.complete),
        "records_not_backfilled": dg.MetadataValue.json(committed.records_not_backfilled or {}),
        "boundary_offsets": dg.MetadataValue.json({str(p): o for p, o in run.boundary.items()}),
        "path": dg.MetadataValue.path(tables.state),
    })
    for name in windows:
        path = tables.path(name)
        yield dg.MaterializeResult(asset_key=scope.key(name), metadata={
            "dagster/row_count": session.read.format("delta").load(path).count(),
            "backlog_watermark": _timestamp(run.backlog_watermark),
            "path": dg.MetadataValue.path(path),
        })


def _handoff(context: dg.AssetExecutionContext, scope: Scope, spark: SparkResource, kafka: KafkaResource,
             warehouse: WarehouseResource) -> dg.MaterializeResult:
    tables = scope.tables(warehouse)
    with user_errors_as_failures(), lease.hold(tables, HANDOFF_OWNER):
        pipeline_settings.settle(tables, HANDOFF_OWNER, adopt=False, pipeline=scope.spec)
        switch = run_handoff(spark.session(), scope.spec, tables, scope.bootstrap(kafka))
    context.log.info(switch.summary(tables.pipeline))
    return dg.MaterializeResult(metadata={
        "handoff_id": switch.handoff_id,
        "topic": switch.topic,
        "start_offsets": dg.MetadataValue.json({str(p): o for p, o in sorted(switch.start_offsets.items())}),
        "backlog_watermark": _timestamp(switch.backlog_watermark),
        "state_version": switch.state_version,
        "reused": switch.reused,
    })


def _stream(context: dg.AssetExecutionContext, scope: Scope, config: StreamConfig, spark: SparkResource,
            kafka: KafkaResource, warehouse: WarehouseResource):
    tables = scope.tables(warehouse)
    if scope.deployment.served:
        yield _served_stream(context, scope, tables)
        return
    if config.until_caught_up and config.for_seconds is not None:
        raise dg.Failure(description="for_seconds applies only with until_caught_up set to false", allow_retries=False)
    with user_errors_as_failures():
        lease.refuse_if_owned(tables)  # the stream process takes the lease itself; this only fails sooner
    switch = current_handoff(tables)
    if switch is None:
        raise dg.Failure(description=f"pipeline {tables.pipeline} has no committed handoff: materialize handoff first",
                         allow_retries=False)
    env = {"SWITCHYARD_SPARK_PROFILE": spark.profile,
           **({"SWITCHYARD_SPARK_MASTER": spark.master} if spark.master else {})}
    seen = yield from launch_and_watch(context, config, tables, scope.bootstrap(kafka), switch, env,
                                      scope.key("stream"), scope.reference)
    statuses = [str(e.status) for e in seen]
    behind = (recorded_figures(seen[-1]).get("offsets_behind") if seen else None) or {}
    yield dg.MaterializeResult(metadata={
        "handoff_id": switch.handoff_id,
        "phase": statuses[-1] if statuses else "",
        "transitions": " → ".join(statuses),
        "switched": Status.SWITCHED in statuses,
        "caught_up": Status.CAUGHT_UP in statuses,
        "rebases": sum(1 for s in statuses if s == Status.PAUSED),
        "still_running": config.detached,
        "stopped_because": (details.reason(seen[-1]) if seen else None) or "",
        "offsets_behind": sum(int(v) for v in behind.values()),
        "offsets_behind_per_partition": dg.MetadataValue.json(behind),
    })


def _served_stream(context: dg.AssetExecutionContext, scope: Scope, tables) -> dg.MaterializeResult:
    """A served pipeline's stream: asked of `switchyard serve`, which runs it; the run ends once it runs."""
    from switchyard.jobs.start import start_served

    with user_errors_as_failures():
        started = start_served(tables, f"dagster {scope.name('stream')}", out=context.log.info)
    latest = PipelineView.read(tables).last
    return dg.MaterializeResult(metadata={
        "handoff_id": latest.handoff_id,
        "phase": str(latest.status),
        "served": True,
        "started_now": started is not None,
        "still_running": True,
    })


def build(scope: Scope) -> dg.Definitions:
    """The pipeline's assets under its keys, group and tags. Each asset the definition shapes carries the definition's
    version as its code version (state_handoff/language/definition.py), so Dagster marks what was made under another one."""
    group, key, windows = scope.group, scope.key, ["windows", "window_state"] if scope.windowed else []
    shaped = definition.version(scope.spec)

    @dg.observable_source_asset(key=key("archive"), group_name=group, tags=scope.tags("archive"))
    def archive(switchyard_warehouse: WarehouseResource) -> dg.ObserveResult:
        """The topic's history as Parquet day folders, each record with its Kafka partition and offset."""
        return _archive(scope.tables(switchyard_warehouse))

    @dg.asset(key=key("tiles"), partitions_def=scope.daily, backfill_policy=dg.BackfillPolicy.single_run(),
              deps=[archive], group_name=group, kinds={"spark", "delta"}, tags=scope.tags("tiles"), code_version=shaped)
    def tiles(context: dg.AssetExecutionContext, config: TilesConfig, switchyard_spark: SparkResource,
              switchyard_kafka: KafkaResource, switchyard_warehouse: WarehouseResource) -> dg.MaterializeResult:
        """Per-key partial aggregates of each archived day, sorted by key (isBacklog = true); a rerun replaces its
        days."""
        return _tiles(context, scope, config, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    window_specs = {
        "windows": "Final window results: windows ending at or before the backlog watermark.",
        "window_state": "Open windows, carried into the stream as state.",
    }

    @dg.multi_asset(name=scope.name("keyed_state"), specs=[
        dg.AssetSpec(key("state"), deps=[tiles], group_name=group, kinds={"spark", "delta"}, tags=scope.tags("state"),
                     description="One row per key: the merged aggregates of every tile (the state handed to the "
                                 "stream).", freshness_policy=STATE_FRESHNESS, code_version=shaped),
        *[dg.AssetSpec(key(name), deps=[tiles], group_name=group, kinds={"delta"}, skippable=True,
                       tags=scope.tags(name), description=window_specs[name], code_version=shaped)
          for name in windows],
    ])
    def keyed_state(context: dg.AssetExecutionContext, config: KeyedStateConfig, switchyard_spark: SparkResource,
                    switchyard_warehouse: WarehouseResource, switchyard_kafka: KafkaResource):
        """Merge all tiles into keyed state and windows and commit the backfill (BACKFILL_COMMITTED)."""
        yield from _keyed_state(context, scope, config, switchyard_spark, switchyard_warehouse, switchyard_kafka)

    @dg.asset(key=key("handoff"), deps=[key(name) for name in ["state", *windows]], group_name=group,
              kinds={"delta", "kafka"}, tags=scope.tags("handoff"), code_version=shaped)
    def handoff(context: dg.AssetExecutionContext, switchyard_spark: SparkResource, switchyard_kafka: KafkaResource,
                switchyard_warehouse: WarehouseResource) -> dg.MaterializeResult:
        """The switch: per-partition start offsets, backlog watermark and state version, committed once."""
        return _handoff(context, scope, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    @dg.asset(key=key("stream"), deps=[handoff], group_name=group, kinds={"spark", "kafka"},
              tags=scope.tags("stream"), code_version=shaped)
    def stream(context: dg.AssetExecutionContext, config: StreamConfig, switchyard_spark: SparkResource,
               switchyard_kafka: KafkaResource, switchyard_warehouse: WarehouseResource):
        """The stream (isBacklog = false) in its own process, from the handoff's offsets; it reports each transition
        and its figures through Dagster Pipes, observed on this asset, and its death fails the run."""
        yield from _stream(context, scope, config, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    return dg.Definitions(assets=[archive, tiles, keyed_state, handoff, stream])
