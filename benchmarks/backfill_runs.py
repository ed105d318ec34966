"""Inside a sort-vs-hash worker process: one backfill timed step by step with its memory and Spark event log,
the `noop`-sink probes after it, and the comparison of two runs' state and window tables."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from benchmarks.backfill_profile import PROBE, event_log_breakdown
from benchmarks.harness import cpu_seconds, rss_bytes

PIPELINE = "demo"
STRATEGIES = ("sort", "hash")
AMOUNT_TOLERANCE = 1e-9  # relative; sums of the same doubles in another order differ in the last bits


def _jvm_memory(spark) -> dict:
    jvm = spark._jvm
    factory = jvm.java.lang.management.ManagementFactory
    pools = {}
    for pool in factory.getMemoryPoolMXBeans():
        if pool.getType().toString() == "Heap memory":
            pools[pool.getName()] = pool.getPeakUsage().getUsed()
    gcs = {gc.getName(): {"count": gc.getCollectionCount(), "ms": gc.getCollectionTime()}
           for gc in factory.getGarbageCollectorMXBeans()}
    args = list(factory.getRuntimeMXBean().getInputArguments())
    return {"max_heap_bytes": jvm.java.lang.Runtime.getRuntime().maxMemory(),
            "xmx": next((a for a in args if a.startswith("-Xmx")), None),
            "heap_pool_peaks_bytes": pools, "heap_peak_upper_bound_bytes": sum(pools.values()), "gc": gcs,
            "pid": jvm.java.lang.ProcessHandle.current().pid()}


def run_worker(args) -> int:
    """Inside the fresh process: one backfill, timed step by step; then memory and the event log."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.backfill import run_backfill
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    run_dir = Path(args.run_dir)
    event_dir = run_dir / "eventlog"
    event_dir.mkdir(parents=True, exist_ok=True)
    conf = {"spark.eventLog.enabled": "true", "spark.eventLog.dir": event_dir.as_uri(),
            "spark.eventLog.compress": "false", "spark.eventLog.logStageExecutorMetrics": "true"}
    if args.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    result: dict = {"strategy": args.strategy, "events": args.events, "finished": False}
    session_started = time.monotonic()
    spark = build_spark(f"bench-backfill-{args.strategy}", extra_conf=conf)
    result["session_start_s"] = round(time.monotonic() - session_started, 2)
    result["shuffle_partitions"] = spark.conf.get("spark.sql.shuffle.partitions")
    result["spark_master"] = spark.sparkContext.master
    result["default_parallelism"] = spark.sparkContext.defaultParallelism
    marks: list[tuple[float, str]] = []
    started = time.monotonic()

    def out(line: str) -> None:
        now = time.monotonic()
        marks.append((now, line))
        spark.sparkContext.setJobDescription(line.strip())
        print(f"[{args.strategy} +{now - started:7.2f}s] {line}", flush=True)

    load_before = os.getloadavg()
    jvm_cpu_before = cpu_seconds(spark._jvm.java.lang.ProcessHandle.current().pid())
    out("[0/5] start")
    try:
        backfill = run_backfill(spark, get_pipeline(PIPELINE), Tables(str(run_dir / "warehouse"), PIPELINE),
                                strategy=args.strategy, out=out)
    except Exception as err:  # the benchmark reports a failed run (e.g. out of heap) instead of dying
        result["error"] = f"{type(err).__name__}: {str(err).strip()[:2000]}"
        print(result["error"], file=sys.stderr, flush=True)
    else:
        ended = time.monotonic()
        result["finished"] = True
        result["wall_s"] = round(ended - started, 3)
        result["records_read"] = backfill.records_read
        result["well_formed"] = backfill.well_formed
        result["dead_lettered"] = backfill.dead_lettered
        result["keys"] = backfill.keys
        result["records_per_s"] = round(backfill.records_read / (ended - started), 1)
        bounds = [t for t, _ in marks] + [ended]
        result["steps"] = [{"step": line.split("]")[0] + "]", "line": line, "wall_s": round(b - a, 3)}
                           for (a, line), b in zip(marks, bounds[1:])]
    spark.sparkContext.setJobDescription(None)
    result["load_average"] = {"before": load_before, "after": os.getloadavg()}
    result["jvm"] = _jvm_memory(spark)
    result["jvm"]["vm_hwm_bytes"] = rss_bytes(result["jvm"]["pid"]).get("VmHWM", 0)
    result["jvm"]["cpu_s"] = round(cpu_seconds(result["jvm"]["pid"]) - jvm_cpu_before, 1)
    result["python_vm_hwm_bytes"] = rss_bytes(os.getpid()).get("VmHWM", 0)
    if result["finished"] and args.probes:
        result["probes"] = run_probes(spark, Tables(str(run_dir / "warehouse"), PIPELINE), args.strategy,
                                      parse_probes=args.strategy == STRATEGIES[0])
    spark.stop()
    logs = sorted(event_dir.iterdir(), key=lambda p: p.stat().st_mtime)
    result["event_log"] = str(logs[-1]) if logs else None
    if logs:
        result["spark"] = event_log_breakdown(logs[-1])
    Path(args.result).write_text(json.dumps(result, indent=2, default=str))
    return 0 if result["finished"] else 1


def run_probes(spark, tables, strategy: str, parse_probes: bool) -> dict[str, float]:
    """After the timed run, in the same JVM: the tiles query and its parts into Spark's `noop` sink (no write).

    scan / parse / parse+filter isolate the cost of the JSON parse and of the filter on `error`, which the
    optimizer pushes below the parse (re-parsing); tiles without the Delta write splits aggregate from write.
    """
    from pyspark.sql import functions as F

    from switchyard.jobs.aggregation import tiles_from_events
    from switchyard.jobs.backfill import read_archive
    from switchyard.state_handoff.io.archive_files import list_archive
    from switchyard.state_handoff.language.parsing import parse_events
    from switchyard.state_handoff.language.pipelines import get_pipeline

    pipeline = get_pipeline(PIPELINE)
    archive = read_archive(spark, tables, list_archive(tables.archive))
    parsed = parse_events(pipeline, archive)
    well_formed = parsed.where(F.col("error").isNull())
    probes = {"tiles, no write": tiles_from_events(pipeline, well_formed, strategy)}
    if parse_probes:
        probes = {"scan": archive, "scan + parse": parsed, "scan + parse + filter": well_formed, **probes}
    seconds = {}
    for name, frame in probes.items():
        spark.sparkContext.setJobDescription(f"{PROBE} {name}")
        started = time.monotonic()
        frame.write.format("noop").mode("overwrite").save()
        seconds[name] = round(time.monotonic() - started, 2)
        print(f"[{strategy} probe] {name}: {seconds[name]:.1f}s", flush=True)
    spark.sparkContext.setJobDescription(None)
    return seconds


STATE_EXACT = ("event_count", "amount_min", "amount_max", "last_by_time", "last_by_event_id", "last_event_time",
               "last_amount")


def compare_worker(args) -> int:
    """Both runs' state (and windows) tables: counts, order-independent checksums, and a key-by-key join."""
    from pyspark.sql import functions as F

    from switchyard.deploy.spark import build_spark

    spark = build_spark("bench-compare")
    report: dict = {}

    def checksum(df, exact: list[str], approx: str):
        row = df.agg(F.count(F.lit(1)).alias("rows"),
                     F.sum(F.xxhash64(*exact).cast("decimal(38,0)")).alias("exact_checksum"),
                     F.sum(approx).alias("approx_sum")).first()
        return {"rows": row["rows"], "exact_checksum": str(row["exact_checksum"]), "amount_sum_total": row["approx_sum"]}

    def mismatches(left, right, on: list[str], exact: list[str], approx: str) -> tuple[int, list]:
        a = left.select(*on, *[F.col(c).alias(f"a_{c}") for c in (*exact, approx)])
        b = right.select(*on, *[F.col(c).alias(f"b_{c}") for c in (*exact, approx)])
        joined = a.join(b, on, "full_outer")
        differs = F.lit(False)
        for c in exact:
            differs = differs | ~F.col(f"a_{c}").eqNullSafe(F.col(f"b_{c}"))
        tolerance = F.lit(AMOUNT_TOLERANCE) * F.greatest(F.lit(1.0), F.abs(F.col(f"a_{approx}")))
        differs = differs | F.col(f"a_{approx}").isNull() | F.col(f"b_{approx}").isNull() \
            | (F.abs(F.col(f"a_{approx}") - F.col(f"b_{approx}")) > tolerance)
        bad = joined.where(differs)
        return bad.count(), [r.asDict() for r in bad.limit(5).collect()]

    tables = {s: Path(args.runs_dir) / s / "warehouse" / PIPELINE for s in args.strategies.split(",")}
    first, second = list(tables)
    for name, on, exact, approx in (
            ("state", ["key"], list(STATE_EXACT), "amount_sum"),
            ("windows", ["key", "window_start"], ["window_end", "event_count"], "amount_sum"),
            ("window_state", ["key", "window_start"], ["window_end", "event_count"], "amount_sum")):
        frames = {s: spark.read.format("delta").load(str(t / name)) for s, t in tables.items()}
        sums = {s: checksum(df, on + exact, approx) for s, df in frames.items()}
        count, examples = mismatches(frames[first], frames[second], on, exact, approx)
        a, b = sums[first], sums[second]
        same = (a["rows"] == b["rows"] and a["exact_checksum"] == b["exact_checksum"] and count == 0
                and abs((a["amount_sum_total"] or 0) - (b["amount_sum_total"] or 0))
                <= AMOUNT_TOLERANCE * max(1.0, abs(a["amount_sum_total"] or 0)))
        report[name] = {"identical": same, "checksums": sums, "mismatched_rows": count, "examples": examples}
    spark.stop()
    Path(args.result).write_text(json.dumps(report, indent=2, default=str))
    return 0 if all(r["identical"] for r in report.values()) else 1
