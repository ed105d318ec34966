"""Prometheus metrics of pipelines, read on each scrape from what `switchyard status` reads: the handoff log, the
lease and the tables' commit statistics (Delta, through delta-rs: no JVM), the running stream's progress cache and
Kafka's offsets. `switchyard metrics` serves them over HTTP for any number of pipelines; `switchyard stream
--metrics-port` serves its own pipeline's beside the stream. The alert rules over them: deploy/prometheus/."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone

from prometheus_client.core import CollectorRegistry, GaugeMetricFamily, Metric

from switchyard.state_handoff.clock import as_utc
from switchyard.state_handoff.control.lifecycle import Phase
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)

PHASES = [phase.name for phase in Phase]


@dataclass(frozen=True)
class Gauge:
    """One metric family: its name (after `switchyard_`), help, the status key it reads, and the label it adds for
    the keys of a per-partition dict."""

    name: str
    help: str
    key: str
    scale: float = 1.0
    per: str | None = None


# What `switchyard status --json` says, as gauges (a table's rows can go back to 0 when a pipeline starts over, so
# none is a counter).
GAUGES = [
    Gauge("offsets_behind", "Offsets between the latest (last stable) offset and the stream's position",
          "offsets_behind", per="partition"),
    Gauge("archive_retention_margin_offsets", "The archive's cut minus Kafka's earliest retained offset: how many "
          "more offsets Kafka may delete before a rebase can no longer recompute them (negative: it has passed)",
          "archive_retention_margin", per="partition"),
    Gauge("input_rows_per_second", "Rows per second arriving at the stream's events query", "input_rows_per_s"),
    Gauge("processed_rows_per_second", "Rows per second the stream's events query processed", "processed_rows_per_s"),
    Gauge("last_batch_seconds", "Duration of the events query's last micro-batch", "last_batch_ms", 0.001),
    Gauge("update_batch_seconds", "Duration of the keyed (update) query's last micro-batch", "update_batch_ms", 0.001),
    Gauge("state_updates_behind", "Keyed updates sent to the updates topic and not yet merged into `state`",
          "state_updates_behind"),
    Gauge("stream_batches", "Committed batches of the current handoff's events query", "stream_batches"),
    Gauge("dead_lettered_records", "Records in `dead_letter` (malformed or beyond the pipeline's limits)",
          "dead_lettered"),
    Gauge("late_records", "Records in `late` (behind the watermark)", "late"),
    Gauge("rebases", "Rebases committed (a handoff with a reconciliation)", "rebases"),
    Gauge("last_rebase_seconds", "Duration of the last committed rebase", "last_rebase_s"),
    Gauge("last_reconciliation_keys_different", "Keys the last rebase's reconciliation found different",
          "last_reconciliation_keys_different"),
]


class PipelineCollector:
    """A Prometheus collector over pipelines' status. `status_of(tables)` is `pipeline_status` by default; a
    pipeline whose status cannot be read reports `switchyard_up 0` and the others go on."""

    def __init__(self, tables: list[Tables], bootstrap: str | None,
                 status_of: Callable[[Tables], dict] | None = None):
        from switchyard.state_handoff.control.status import pipeline_status

        self.tables = tables
        self.status_of = status_of or (lambda t: pipeline_status(t, bootstrap))

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("switchyard_up", "1 when the pipeline's status was read on this scrape",
                               labels=["pipeline"])
        seconds = GaugeMetricFamily("switchyard_scrape_seconds", "Time taken to read the pipeline's status",
                                    labels=["pipeline"])
        phase = GaugeMetricFamily("switchyard_phase", "1 for the pipeline's phase (`switchyard status`), 0 for the "
                                  "others", labels=["pipeline", "phase"])
        running = GaugeMetricFamily("switchyard_stream_running", "1 while a stream process holds the lease",
                                    labels=["pipeline"])
        lease = GaugeMetricFamily("switchyard_lease_epoch", "The fencing epoch of the lease's holder, labelled with "
                                  "who holds it", labels=["pipeline", "command", "host", "pid"])
        past = GaugeMetricFamily("switchyard_retention_past_archive_partitions", "Partitions where Kafka's "
                                 "retention has passed the archive's cut", labels=["pipeline"])
        lost = GaugeMetricFamily("switchyard_lost_offsets", "Offsets recorded as lost to Kafka's retention before "
                                 "any handoff read them", labels=["pipeline"])
        age = GaugeMetricFamily("switchyard_phase_age_seconds", "Seconds since the pipeline's latest log entry: how long "
                                "it has been in its phase", labels=["pipeline"])
        gauges = {g.name: GaugeMetricFamily(f"switchyard_{g.name}", g.help,
                                            labels=["pipeline", *([g.per] if g.per else [])]) for g in GAUGES}
        for tables in self.tables:
            name = tables.pipeline
            started = time.monotonic()
            try:
                status = self.status_of(tables)
            except Exception:  # a scrape reports what it can: this pipeline is down, the others are not
                up.add_metric([name], 0)
                continue
            seconds.add_metric([name], time.monotonic() - started)
            up.add_metric([name], 1)
            current = Phase(status["phase"]).name
            for each in PHASES:
                phase.add_metric([name, each], 1 if each == current else 0)
            running.add_metric([name], 1 if status["stream_running"] else 0)
            if status.get("latest_at"):
                since = datetime.now(timezone.utc) - as_utc(datetime.fromisoformat(status["latest_at"]))
                age.add_metric([name], max(0.0, since.total_seconds()))
            if status.get("lease"):
                held = status["lease"]
                lease.add_metric([name, held["command"], held["host"], str(held["pid"])], held["epoch"])
            past.add_metric([name], len(status.get("retention_past_archive") or []))
            lost.add_metric([name], sum(r["records"] for r in status.get("lost_offsets") or []))
            for g in GAUGES:
                value = status.get(g.key)
                if isinstance(value, dict):
                    for part, figure in sorted(value.items(), key=lambda item: int(item[0])):
                        if isinstance(figure, (int, float)):  # unknown is absent, not 0
                            gauges[g.name].add_metric([name, str(part)], figure * g.scale)
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    gauges[g.name].add_metric([name], value * g.scale)
        yield from [up, seconds, phase, running, age, lease, past, lost, *gauges.values()]


def registry_for(tables: list[Tables], bootstrap: str | None, also=()) -> CollectorRegistry:
    """The pipelines' metrics, and those of `also` (collectors: objects with `collect()`)."""
    registry = CollectorRegistry(auto_describe=False)
    for collector in (PipelineCollector(tables, bootstrap), *also):
        registry.register(collector)
    return registry


def _start_server(tables: list[Tables], bootstrap: str | None, port: int, address: str, also=()):
    """Serve the pipelines' metrics (and `also`'s) at http://ADDRESS:PORT/metrics on a daemon thread; returns the
    server (its `server_port` is the port taken when `port` is 0) and thread."""
    from prometheus_client import start_http_server

    from switchyard.state_handoff.errors import UserError

    try:
        return start_http_server(port, addr=address, registry=registry_for(tables, bootstrap, also))
    except OSError as err:  # taken, or an address this host does not have
        raise UserError(f"cannot serve metrics at {address}:{port} ({err.strerror or err}): pick another port or "
                        "address") from None


@contextmanager
def served(tables: list[Tables], bootstrap: str | None, port: int | None, address: str, who: str, also=()):
    """The pipelines' metrics served while the block runs (nothing when `port` is None), their address logged."""
    if port is None:
        yield None
        return
    server, _ = _start_server(tables, bootstrap, port, address, also)
    logger.info(f"{who}: metrics at http://{address}:{server.server_port}/metrics")
    try:
        yield server
    finally:
        server.shutdown()


def check_port(port: int, flag: str) -> int:
    """A port for the metrics' server, refused in one line before any work when out of range."""
    from switchyard.state_handoff.errors import UserError

    if not 0 <= port <= 65535:
        raise UserError(f"{flag} must be a port from 0 (any free one) to 65535, not {port}")
    return port
