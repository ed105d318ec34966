"""A live stream as the orchestration tests watch it: a small archived topic, events stamped now, the wait for them
to stream, and the stream_health sensor ticked with a test deployment's resources."""

from __future__ import annotations

import io
import json
from datetime import datetime, timezone

import dagster as dg

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.inputs.generate import DEFAULT_START, run_generate
from switchyard.orchestration import sensors
from switchyard.orchestration.resources import KafkaResource, SparkResource, StreamMonitorResource, WarehouseResource
from switchyard.orchestration.stream_health import read_progress
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.dagster_defs import scope

PIPELINE = get_pipeline("demo")
PLOTTED = ("offsets_behind", "update_latency_p50_s", "update_latency_p99_s", "input_rate", "processed_rate",
           "watermark_delay_s")


def _quiet(*_):
    pass


def archived_topic(spark, bootstrap: str, topic: str, warehouse: str, *, seed: int = 3,
                   start: datetime = DEFAULT_START) -> Tables:
    """300 events over 24 hours from `start` on two partitions, the first 80% of each archived; the rest is the
    stream's."""
    run_generate(bootstrap, topic, events=300, keys=10, partitions=2, days=1, seed=seed, malformed_rate=0.0,
                 start=start, out=io.StringIO())
    tables = Tables(warehouse, PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.8), out=_quiet)
    return tables


def resources(tables: Tables, bootstrap: str) -> dict:
    """A test deployment's resources: the test Spark profile, tight lag and latency bounds."""
    return {"switchyard_spark": SparkResource(profile="test"), "switchyard_kafka": KafkaResource(bootstrap=bootstrap),
            "switchyard_warehouse": WarehouseResource(warehouse=tables.warehouse),
            "switchyard_monitor": StreamMonitorResource(max_offsets_behind=50, max_update_latency_s=120)}


def tick(tables: Tables, bootstrap: str, cursor: str | None = None) -> dg.SensorResult:
    """One evaluation of the pipeline's stream_health sensor, as the daemon runs it (nothing recorded)."""
    deployment = resources(tables, bootstrap)
    return sensors.evaluate(dg.build_sensor_context(cursor=cursor), scope(tables.pipeline),
                            *(deployment[f"switchyard_{k}"] for k in ("warehouse", "kafka", "monitor")))


def live_events(n: int, tag: str) -> list[tuple]:
    """`n` well-formed events over seven keys, stamped with the current time."""
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return [(f"k{i % 7}".encode(), json.dumps({"event_id": f"{tag}-{i}", "key": f"k{i % 7}", "event_time": now,
                                               "amount": 1.0, "kind": "live"}).encode()) for i in range(n)]


def read_past(tables: Tables, since: float) -> bool:
    """The stream has read everything on the topic at a moment after `since`."""
    progress = read_progress(tables)
    return progress is not None and progress.updated is not None and progress.updated > since + 2 \
        and progress.offsets_behind == 0
