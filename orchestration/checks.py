"""Great Expectations gates on a pipeline's tables (a failing blocking check stops everything downstream of it), and
its stream's health checks."""

import time
from datetime import datetime

import dagster as dg
import great_expectations as gx
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import TILE_START
from switchyard.jobs.backfill import newest_archived_event_time, read_archive
from switchyard.orchestration.expectations import check_result, run_suite
from switchyard.orchestration.partitions import days_of
from switchyard.orchestration.resources import KafkaResource, SparkResource, StreamMonitorResource, WarehouseResource
from switchyard.orchestration.scope import Scope
from switchyard.orchestration.stream_health import CHECKS, Watch, problem, read_progress, sample_latency, verdicts
from switchyard.state_handoff.control import kafka_retention
from switchyard.state_handoff.control.handoffs import current_handoff
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import archive_meta, list_archive, unreadable
from switchyard.state_handoff.io.kafka_io import offset_bounds
from switchyard.state_handoff.io.storage import delta_options
from switchyard.state_handoff.language.aggregates import LAST_BY_TIME, WINDOW_PREFIX
from switchyard.state_handoff.language.spec import Aggregation, Pipeline
from switchyard.state_handoff.tables import Tables


def _counts_at_least_one(aggregations: tuple[Aggregation, ...], prefix: str = "") -> list:
    return [gx.expectations.ExpectColumnValuesToBeBetween(column=prefix + a.name, min_value=1)
            for a in aggregations if a.kind == "count"]


def _min_not_above_max(aggregations: tuple[Aggregation, ...]) -> list:
    lows = {a.column: a.name for a in aggregations if a.kind == "min"}
    return [gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(column_A=a.name, column_B=lows[a.column],
                                                                    or_equal=True)
            for a in aggregations if a.kind == "max" and a.column in lows]


def _keys_present(pipeline: Pipeline) -> list:
    return [gx.expectations.ExpectColumnValuesToNotBeNull(column=k) for k in pipeline.keys]


def _unique(columns: tuple[str, ...]):
    if len(columns) == 1:
        return gx.expectations.ExpectColumnValuesToBeUnique(column=columns[0])
    return gx.expectations.ExpectCompoundColumnsToBeUnique(column_list=list(columns))


def state_expectations(pipeline: Pipeline, newest_archived: datetime | None) -> list:
    last_times = [LAST_BY_TIME] + [a.name for a in pipeline.aggregations
                                   if a.kind == "last" and a.column == pipeline.event_time]
    not_after_archive = [] if newest_archived is None else [
        gx.expectations.ExpectColumnValuesToBeBetween(column=c, max_value=newest_archived) for c in last_times]
    return [
        *_keys_present(pipeline),
        _unique(pipeline.keys),
        *_counts_at_least_one(pipeline.aggregations),
        *_min_not_above_max(pipeline.aggregations),
        *not_after_archive,
    ]


def window_expectations(pipeline: Pipeline) -> list:
    size = pipeline.windows.size
    return [
        gx.expectations.ExpectColumnValuesToNotBeNull(column="window_start"),
        _unique((*pipeline.keys, "window_start")),
        gx.expectations.UnexpectedRowsExpectation(
            unexpected_rows_query=("SELECT * FROM {batch} WHERE window_end IS NULL OR window_end <> "
                                   f"window_start + INTERVAL {int(size.total_seconds())} SECONDS"),
            description=f"window_end = window_start + {size}"),
        *_counts_at_least_one(pipeline.windows.aggregations),
    ]


def tile_expectations(pipeline: Pipeline) -> list:
    return [
        *_keys_present(pipeline),
        _unique((*pipeline.keys, TILE_START, "kafka_partition")),
        *_counts_at_least_one(pipeline.aggregations),
        *(_counts_at_least_one(pipeline.windows.aggregations, WINDOW_PREFIX) if pipeline.windows else []),
    ]


HANDOFF_EXPECTATIONS = [
    gx.expectations.ExpectColumnValuesToNotBeNull(column="start_offset"),
    gx.expectations.ExpectColumnPairValuesToBeEqual(column_A="start_offset", column_B="archive_end"),
    gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(column_A="start_offset", column_B="retained_earliest",
                                                            or_equal=True),
    gx.expectations.ExpectColumnPairValuesAToBeGreaterThanB(column_A="retained_latest", column_B="start_offset",
                                                            or_equal=True),
]


def handoff_offsets(spark: SparkSession, tables: Tables, start: dict[int, int], bootstrap: str) -> DataFrame:
    """Per partition of the topic: the handoff's start offset beside where the archive ends and what Kafka retains.

    The archive's end is read from the files themselves (highest archived offset + 1), not from the backfill's
    log entry; a partition with nothing archived ends where its archive cut does, or where retention begins.
    """
    meta = archive_meta(tables.archive)
    bounds = offset_bounds(bootstrap, meta["topic"])
    files = [f for f in list_archive(tables.archive) if unreadable(f.path) is None]
    archived = {int(p): int(o) for p, o in read_archive(spark, tables, files).groupBy("kafka_partition")
                .agg(F.max("kafka_offset")).collect()}
    cut = {int(p): int(o) for p, o in meta["cut"].items()}
    rows = []
    for p in sorted(set(bounds) | set(archived) | set(start)):
        earliest, latest = bounds.get(p, (None, None))
        end = archived[p] + 1 if p in archived else cut.get(p, earliest)
        rows.append((p, start.get(p), end, earliest, latest))
    return spark.createDataFrame(rows, "kafka_partition INT, start_offset BIGINT, archive_end BIGINT, "
                                       "retained_earliest BIGINT, retained_latest BIGINT")


def _table(spark: SparkSession, path: str) -> DataFrame:
    return spark.read.format("delta").load(path)


def _tiles_are_sound(context: dg.AssetCheckExecutionContext, scope: Scope, spark: SparkResource,
                     warehouse: WarehouseResource) -> dg.AssetCheckResult:
    from deltalake import DeltaTable  # delta-rs: no JVM call, so a Spark Connect session checks as a classic one

    session, pipeline, tables = spark.session(), scope.spec, scope.tables(warehouse)
    if not DeltaTable.is_deltatable(tables.tiles, delta_options(tables.tiles)):
        return dg.AssetCheckResult(passed=True, description="no tiles yet: the archive has no days in the range")
    run = context.op_execution_context
    tiles_df, days = _table(session, tables.tiles), "all"
    if run.has_partition_key or run.has_partition_key_range:
        first, last = days_of(run.partition_time_window)
        tiles_df, days = tiles_df.where(F.col("event_date").between(F.lit(first), F.lit(last))), f"{first}..{last}"
    return check_result(run_suite(tiles_df, "tiles", tile_expectations(pipeline)), days=days)


def _state_is_sound(scope: Scope, spark: SparkResource, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    session, pipeline, tables = spark.session(), scope.spec, scope.tables(warehouse)
    # once a stream has run, state also holds what it read past the archive (a rebase recomputes up to its cut)
    streamed = current_handoff(tables) is not None
    newest = None if streamed else newest_archived_event_time(session, pipeline, tables)
    outcomes = run_suite(_table(session, tables.state), "state", state_expectations(pipeline, newest))
    return check_result(outcomes, newest_archived_event_time=str(newest) if newest else "not checked: streamed")


def _handoff_is_contiguous(scope: Scope, spark: SparkResource, kafka: KafkaResource,
                           warehouse: WarehouseResource) -> dg.AssetCheckResult:
    session, tables = spark.session(), scope.tables(warehouse)
    switch = current_handoff(tables)
    if switch is None:
        return dg.AssetCheckResult(passed=False, description="no committed handoff in the log")
    offsets = handoff_offsets(session, tables, switch.start_offsets, scope.bootstrap(kafka))
    table = "\n".join(f"| {r.kafka_partition} | {r.start_offset} | {r.archive_end} | "
                      f"{r.retained_earliest}..{r.retained_latest} |" for r in offsets.collect())
    return check_result(run_suite(offsets, "handoff", HANDOFF_EXPECTATIONS), handoff_id=switch.handoff_id,
                        partitions=dg.MetadataValue.md("| partition | start offset | archive ends | retained |\n"
                                                       "|---|---|---|---|\n" + table))


def _archive_within_retention(scope: Scope, kafka: KafkaResource, warehouse: WarehouseResource) -> dg.AssetCheckResult:
    try:
        margins = kafka_retention.margins(scope.tables(warehouse), scope.bootstrap(kafka))
    except UserError as err:
        return dg.AssetCheckResult(passed=False, severity=dg.AssetCheckSeverity.WARN, description=str(err))
    passed = [m for m in margins if m.passed]
    table = "\n".join(f"| {m.partition} | {m.archive_cut} | {m.earliest_retained} | {m.offsets} |" for m in margins)
    metadata = {"margin": dg.MetadataValue.json({str(m.partition): m.offsets for m in margins}),
                "min_margin": min((m.offsets for m in margins), default=0),
                "partitions": dg.MetadataValue.md("| partition | archive cut | earliest retained | margin |\n"
                                                  "|---|---|---|---|\n" + table)}
    if passed:
        return dg.AssetCheckResult(passed=False, metadata=metadata, description=(
            "Kafka's retention has passed the archive's cut, so no rebase can recompute the records in between "
            "(the streamed state stands): " + "; ".join(m.describe() for m in passed)))
    return dg.AssetCheckResult(passed=True, metadata=metadata, description=(
        f"Kafka retains every partition from the archive's cut on (least margin {metadata['min_margin']} offsets)"))


def _stream_is_healthy(scope: Scope, warehouse: WarehouseResource,
                       monitor: StreamMonitorResource) -> dg.AssetCheckResult:
    progress = read_progress(scope.tables(warehouse))
    if progress is None:
        return dg.AssetCheckResult(passed=False, description="no handoff yet: nothing streams")
    now = time.time()
    verdict = problem(progress, Watch(), now, monitor.stall_seconds, monitor.max_offsets_behind)
    return dg.AssetCheckResult(passed=verdict is None, metadata=progress.metadata(now),
                               description=verdict or f"stream {progress.status.lower()}")


def _stream_checks(scope: Scope, warehouse: WarehouseResource, kafka: KafkaResource, monitor: StreamMonitorResource):
    progress = read_progress(scope.tables(warehouse))
    if progress is None:
        for name in CHECKS:
            yield dg.AssetCheckResult(check_name=name, passed=False, severity=dg.AssetCheckSeverity.WARN,
                                      description="no handoff yet: nothing streams")
        return
    sample_latency(progress, scope.bootstrap(kafka), scope.spec, scope.tables(warehouse))
    metadata = progress.metadata(time.time())
    for verdict in verdicts(progress, monitor):
        yield dg.AssetCheckResult(check_name=verdict.check_name, passed=verdict.passed, severity=verdict.severity,
                                  description=verdict.description, metadata=metadata)


def _windows_check(scope: Scope, table: str):
    @dg.asset_check(asset=scope.key(table), name=f"{table}_are_sound" if table == "windows" else f"{table}_is_sound",
                    blocking=True,
                    description=f"{table}: one row per (key, window), window_end = window_start + size, counts >= 1.")
    def windows_are_sound(switchyard_spark: SparkResource,
                          switchyard_warehouse: WarehouseResource) -> dg.AssetCheckResult:
        session, tables = switchyard_spark.session(), scope.tables(switchyard_warehouse)
        return check_result(run_suite(_table(session, tables.path(table)), table, window_expectations(scope.spec)))

    return windows_are_sound


def build(scope: Scope) -> dg.Definitions:
    """The pipeline's checks, on its assets' keys."""

    @dg.asset_check(asset=scope.key("tiles"), blocking=True)
    def tiles_are_sound(context: dg.AssetCheckExecutionContext, switchyard_spark: SparkResource,
                        switchyard_warehouse: WarehouseResource) -> dg.AssetCheckResult:
        """Tiles of the run's days (every tile when run on its own): keys present, one tile per (key, tile,
        partition), every count at least 1."""
        return _tiles_are_sound(context, scope, switchyard_spark, switchyard_warehouse)

    @dg.asset_check(asset=scope.key("state"), blocking=True)
    def state_is_sound(switchyard_spark: SparkResource,
                       switchyard_warehouse: WarehouseResource) -> dg.AssetCheckResult:
        """Keyed state: keys non-null and unique, counts at least 1, min <= max, nothing newer than the archive."""
        return _state_is_sound(scope, switchyard_spark, switchyard_warehouse)

    @dg.asset_check(asset=scope.key("handoff"), blocking=True)
    def handoff_is_contiguous(switchyard_spark: SparkResource, switchyard_kafka: KafkaResource,
                              switchyard_warehouse: WarehouseResource) -> dg.AssetCheckResult:
        """Every partition starts exactly where the archive ends (no gap, no overlap), at an offset Kafka still
        retains."""
        return _handoff_is_contiguous(scope, switchyard_spark, switchyard_kafka, switchyard_warehouse)

    @dg.asset_check(asset=scope.key("handoff"))
    def archive_within_retention(switchyard_kafka: KafkaResource,
                                 switchyard_warehouse: WarehouseResource) -> dg.AssetCheckResult:
        """Kafka still retains every partition from the archive's cut on (archive cut minus earliest retained
        offset, per partition, at least 0): a rebase can recompute what the stream read."""
        return _archive_within_retention(scope, switchyard_kafka, switchyard_warehouse)

    @dg.asset_check(asset=scope.key("stream"))
    def stream_is_healthy(switchyard_warehouse: WarehouseResource,
                          switchyard_monitor: StreamMonitorResource) -> dg.AssetCheckResult:
        """The stream stopped cleanly or is making progress within its lag threshold (the sensor re-evaluates
        it)."""
        return _stream_is_healthy(scope, switchyard_warehouse, switchyard_monitor)

    @dg.multi_asset_check(name=scope.name("stream_checks"),
                          specs=[dg.AssetCheckSpec(name, asset=scope.key("stream"), description=text)
                                 for name, text in CHECKS.items()])
    def stream_checks(switchyard_warehouse: WarehouseResource, switchyard_kafka: KafkaResource,
                      switchyard_monitor: StreamMonitorResource):
        """The stream at a glance: process alive, caught up, update latency, last reconciliation (the sensor
        re-evaluates them as the stream goes)."""
        yield from _stream_checks(scope, switchyard_warehouse, switchyard_kafka, switchyard_monitor)

    windows = [_windows_check(scope, table) for table in ("windows", "window_state")] if scope.windowed else []
    return dg.Definitions(asset_checks=[tiles_are_sound, state_is_sound, *windows, handoff_is_contiguous,
                                        archive_within_retention, stream_is_healthy, stream_checks])
