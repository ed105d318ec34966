"""Update latency: steady input at fixed rates into a running, switched stream; the time from an input record's
Kafka timestamp to the Kafka timestamp of the update it caused on the updates topic."""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.harness import add_connection, start_service, switchyard_command, terminate, write_json
from switchyard.jobs.inputs.encoding import event_time_text, event_value
from switchyard.jobs.stream.options import StreamOptions
from switchyard.jobs.stream.updates_topic import last_started_with
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import create_topic, offset_bounds, paced, produce
from switchyard.state_handoff.io.kafka_security import client_kwargs
from switchyard.state_handoff.stream.layout import StreamPaths, read_json
from switchyard.state_handoff.tables import Tables


@dataclass
class RateResult:
    rate: int
    seconds: float
    sent: int
    matched: int
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float


@dataclass
class LatencyReport:
    trigger: str
    results: list[RateResult] = field(default_factory=list)
    seconds_to_switched: float | None = None
    seconds_to_caught_up: float | None = None
    switched_in_process_s: float | None = None  # the stream process's own start (its supervisor's) to SWITCHED
    # where each query's batches spent their time over the last rate measured (batch_phases)
    batches: dict = field(default_factory=dict)

    def table(self) -> str:
        lines = [f"stream latency, Kafka timestamp in -> update out ({self.trigger})",
                 f"{'rate/s':>8} {'sent':>8} {'matched':>8} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}"]
        for r in self.results:
            lines.append(f"{r.rate:>8} {r.sent:>8} {r.matched:>8} {r.p50_ms:>8.0f} {r.p95_ms:>8.0f} "
                         f"{r.p99_ms:>8.0f} {r.max_ms:>8.0f}")
        return "\n".join(lines)


def batch_phases(recent: dict[str, list[dict]], last: int = 60) -> dict:
    """Per query, the median and the largest of each phase over its last `last` batches that read rows, from the
    recent progress a stream keeps when it stops (jobs/stream/queries.py: keep_recent_progress): Spark's own phases
    (`duration_ms`: planning, the batch's jobs as `addBatch`, the offset and commit logs) and the state store's
    (`state_ms`)."""
    import statistics

    phases = {}
    for query, progress in recent.items():
        batches = [p for p in progress if p["rows"] > 0][-last:]
        if not batches:
            continue
        figures = {"batches": len(batches), "rows_median": statistics.median(p["rows"] for p in batches)}
        for group in ("duration_ms", "state_ms"):
            names = sorted({name for p in batches for name in p.get(group, {})})
            for name in names:
                values = [p.get(group, {}).get(name, 0) for p in batches]
                figures[f"{group.removesuffix('_ms')}.{name}"] = {"median": statistics.median(values),
                                                                 "max": max(values)}
        phases[query] = figures
    return phases


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def latency_event(key: str, event_id: str, when: datetime, amount: float) -> bytes:
    """A demo event of kind "latency"."""
    return event_value(event_id, key, event_time_text(when), amount, "latency")


def _steady_input(bootstrap: str, topic: str, rate: int, seconds: float, tag: str, sent_at: dict) -> int:
    """Send `rate` events per second, each to a fresh key so that one update answers exactly one input; each
    is stamped as it is sent (its Kafka timestamp too, when `produce` takes it, so a record's wait for its
    batch counts in its latency).

    The producer lingers 5 ms for a batch, the default of librdkafka and of Kafka's Java client since 4.0: without
    it every record is a request of its own, and at high rates the broker and the sender take cores the stream
    under measurement shares on a small machine."""
    def records():
        for n in itertools.count():
            event_id = f"{tag}-{n}"
            sent_at[event_id] = None
            yield event_id.encode(), latency_event(event_id, event_id, datetime.now(timezone.utc), 1.0)

    return produce(bootstrap, topic, paced(records(), rate, seconds=seconds), linger_ms=5)


def _collect_updates(bootstrap: str, topic: str, stop: threading.Event, seen: dict) -> None:
    from confluent_kafka import OFFSET_END, Consumer, TopicPartition

    from switchyard.state_handoff.io.kafka_io import partitions_of
    from switchyard.state_handoff.io.kafka_security import librdkafka_config

    consumer = Consumer({**librdkafka_config(bootstrap), "group.id": f"latency-{time.time_ns()}",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_END) for p in partitions_of(bootstrap, topic)])
    try:
        while not stop.is_set():
            for message in consumer.consume(num_messages=10_000, timeout=0.2):
                if message.error() is None:
                    update = json.loads(message.value())
                    seen.setdefault(update.get("last_by_event_id"), message.timestamp()[1])
    finally:
        consumer.close()


def _input_timestamps(bootstrap: str, topic: str, start: dict[int, int]) -> dict[str, int]:
    """The broker-side Kafka timestamp of every latency input, read back from the topic."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_kwargs(), enable_auto_commit=False,
                             consumer_timeout_ms=5000)
    parts = [TopicPartition(topic, p) for p in sorted(start)]
    consumer.assign(parts)
    for tp in parts:
        consumer.seek(tp, start[tp.partition])
    stamps = {}
    for message in consumer:
        stamps[json.loads(message.value)["event_id"]] = message.timestamp
    consumer.close()
    return stamps


def small_switched_pipeline(tables: Tables, bootstrap: str, topic: str, out=print):
    """The demo pipeline switched over a new topic: 4,000 events on 200 keys from two hours ago, archived whole,
    backfilled and handed off (in a JVM of its own, stopped after). Returns the handoff."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.state_handoff.language.pipelines import get_pipeline

    pipeline = get_pipeline("demo")
    create_topic(bootstrap, topic, partitions=2)
    now = datetime.now(timezone.utc)
    backlog = [(f"seed-{i % 200}".encode(), latency_event(f"seed-{i % 200}", f"seed-{i}", now - timedelta(hours=2) +
                                                     timedelta(seconds=i), float(i % 50)), i % 2, None)
               for i in range(4000)]
    produce(bootstrap, topic, backlog)
    spark = build_spark("switchyard-latency-setup")
    run_archive(spark, pipeline, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=1.0), out=out)
    run_backfill(spark, pipeline, tables, out=out)
    handoff = run_handoff(spark, pipeline, tables, bootstrap)
    spark.stop()
    return handoff


def run_latency_bench(warehouse: str, bootstrap: str, rates: list[int], seconds: float,
                      trigger_seconds: float = 0.0,
                      tables_trigger_seconds: float = StreamOptions.tables_trigger_seconds,
                      warmup_seconds: float = 20.0, out=print) -> LatencyReport:
    """Set up a small switched pipeline, then measure at each rate in turn."""
    from switchyard.state_handoff.language.pipelines import get_pipeline

    pipeline = get_pipeline("demo")
    stamp = int(time.time())
    # a warehouse and a topic of its own per run: an archive grows along one topic only
    warehouse = str(Path(warehouse) / f"latency-{stamp}")
    tables = Tables(warehouse, pipeline.name)
    topic = f"latency.{stamp}"
    handoff = small_switched_pipeline(tables, bootstrap, topic, out=out)

    started = time.monotonic()
    proc = start_service(switchyard_command("stream", "--pipeline", pipeline.name, "--warehouse", warehouse,
                                            "--bootstrap", bootstrap, "--caught-up-lag", "0",
                                            "--trigger-seconds", trigger_seconds,
                                            "--tables-trigger-seconds", tables_trigger_seconds),
                         Path(warehouse) / "latency-stream.log")
    report = LatencyReport(trigger=f"update query processingTime={trigger_seconds:g}s, Delta-writing queries every "
                                   f"{max(trigger_seconds, tables_trigger_seconds):g}s, "
                                   f"RocksDB state store, {warmup_seconds:g}s of warm-up input per rate")
    try:
        report.seconds_to_switched = _wait_for(tables, Status.SWITCHED, handoff.handoff_id, proc, started)
        switched = handoff_log.latest(tables, Status.SWITCHED, handoff.handoff_id)
        report.switched_in_process_s = details.of(switched).seconds_since_start
        report.seconds_to_caught_up = _wait_for(tables, Status.CAUGHT_UP, handoff.handoff_id, proc, started)
        for rate in rates:
            report.results.append(_measure(bootstrap, topic, last_started_with(tables), rate, seconds, warmup_seconds))
            out(report.table().splitlines()[-1])
    finally:
        terminate(proc, timeout=120)
    recent = read_json(StreamPaths.of(tables, handoff.handoff_id).recent_progress)
    if recent is not None:
        report.batches = batch_phases(recent)
    return report


def _wait_for(tables: Tables, status: str, handoff_id: str, proc, started: float,
              timeout: float = 600) -> float:
    while time.monotonic() - started < timeout:
        if handoff_log.latest(tables, status, handoff_id) is not None:
            return time.monotonic() - started
        if proc.poll() is not None:
            raise RuntimeError(f"the stream exited with {proc.returncode} before {status}")
        time.sleep(0.5)
    raise RuntimeError(f"no {status} within {timeout}s")


def _measure(bootstrap: str, topic: str, updates_topic: str, rate: int, seconds: float,
             warmup_seconds: float) -> RateResult:
    """Steady input at `rate`: first `warmup_seconds` not counted (each query's first batches at a new rate
    compile code and grow their Delta tables' first files), then `seconds` measured."""
    if warmup_seconds > 0:
        _steady_input(bootstrap, topic, rate, warmup_seconds, f"warmup-r{rate}-{time.time_ns()}", {})
    start = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic).items()}
    seen: dict[str, int] = {}
    stop = threading.Event()
    collector = threading.Thread(target=_collect_updates, args=(bootstrap, updates_topic, stop, seen), daemon=True)
    collector.start()
    time.sleep(1.0)  # the collector is positioned at the end of the updates topic
    sent_at: dict[str, None] = {}
    sent = _steady_input(bootstrap, topic, rate, seconds, f"r{rate}-{int(time.time())}", sent_at)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not all(k in seen for k in sent_at):
        time.sleep(0.5)
    stop.set()
    collector.join(timeout=10)
    stamps = _input_timestamps(bootstrap, topic, start)
    latencies = sorted(seen[k] - stamps[k] for k in sent_at if k in seen and k in stamps)
    return RateResult(rate, seconds, sent, len(latencies), _percentile(latencies, 0.50), _percentile(latencies, 0.95),
                      _percentile(latencies, 0.99), latencies[-1] if latencies else float("nan"))


GOALS = {"p99_ms_at_1000_per_s_at_most": 1000, "highest_rate_with_p99_ms_at_most": 2000}


def goals(results: list[dict]) -> dict:
    """The goals against a run's rates: p99 at 1,000 events/s, and the highest rate measured whose p99 is within
    the bound (None where the run has no such rate)."""
    at_1000 = next((r["p99_ms"] for r in results if r["rate"] == 1000), None)
    bound = GOALS["highest_rate_with_p99_ms_at_most"]
    within = [r["rate"] for r in results if r["p99_ms"] <= bound]
    return {**GOALS, "p99_ms_at_1000_per_s": at_1000,
            "p99_at_1000_per_s_met": None if at_1000 is None else at_1000 <= GOALS["p99_ms_at_1000_per_s_at_most"],
            "highest_rate_measured_with_p99_within": max(within) if within else None}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks latency", description=__doc__)
    parser.add_argument("--rates", default="500,1000,2000", help="comma-separated events/s, measured in turn")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of steady input per rate")
    parser.add_argument("--trigger-seconds", type=float, default=0.0)
    parser.add_argument("--tables-trigger-seconds", type=float, default=5.0,
                        help="how often the Delta-writing queries run while latency is measured")
    parser.add_argument("--warmup-seconds", type=float, default=20.0,
                        help="steady input before each rate's measurement, not counted")
    parser.add_argument("--json", dest="json_file", metavar="FILE")
    add_connection(parser)
    args = parser.parse_args(argv)
    try:
        rates = [int(r) for r in args.rates.split(",") if r.strip()]
    except ValueError:
        raise UserError(f"--rates must be comma-separated integers, not {args.rates!r}") from None
    report = run_latency_bench(args.warehouse, args.bootstrap, rates, args.seconds, args.trigger_seconds,
                               args.tables_trigger_seconds, args.warmup_seconds)
    print(report.table())
    in_process = (f" ({report.switched_in_process_s:.1f}s from the stream's own start)"
                  if report.switched_in_process_s is not None else "")
    for query, figures in report.batches.items():
        timed = {name: f["median"] for name, f in figures.items() if isinstance(f, dict) and f["median"] >= 5
                 and not name.endswith(("rows", "SstFileSize"))}
        print(f"{query}: {figures['batches']} batches of median {figures['rows_median']:,.0f} rows, median ms: "
              + ", ".join(f"{name} {ms:,.0f}" for name, ms in timed.items()))
    print(f"SWITCHED {report.seconds_to_switched:.1f}s{in_process} and CAUGHT_UP {report.seconds_to_caught_up:.1f}s "
          "after stream start")
    figures = dataclasses.asdict(report)
    figures["goals"] = goals(figures["results"])
    if args.json_file:
        write_json(args.json_file, figures)
    return 0
