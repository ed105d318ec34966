"""Where a backfill's time goes, from its Spark event log: metrics per stage and per backfill step (the job
description), and the tiles step split by kind of work (scan and parse, shuffle, sort, aggregate, Delta write)."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

#: The job description prefix of the `noop`-sink probes run after a timed backfill.
PROBE = "[probe]"


def _plan_metrics(plan: dict, into: dict[int, tuple[str, str]]) -> None:
    node = plan.get("nodeName", "")
    label = node
    if node.startswith("Sort") and plan.get("simpleString"):
        columns = re.findall(r"(\w+)#\d+ (?:ASC|DESC)", plan["simpleString"])
        label = f"Sort by ({', '.join(columns)})" if columns else node
    for metric in plan.get("metrics", []):
        into[int(metric["accumulatorId"])] = (label, metric["name"])
    for child in plan.get("children", []):
        _plan_metrics(child, into)


def _event_lines(path: Path):
    """A plain event log file, or Spark 4's rolling directory of events_<n>_<app> files."""
    files = [path] if path.is_file() else sorted(
        path.glob("events_*"), key=lambda p: int(p.name.split("_")[1]) if p.name.split("_")[1].isdigit() else 0)
    for file in files:
        with open(file) as fh:
            yield from fh


def event_log_breakdown(path: Path) -> dict:
    """Stage metrics per backfill step (the job description), plus SQL operator metrics for every stage."""
    accumulators: dict[int, tuple[str, str]] = {}
    stage_step: dict[int, str] = {}
    stages: dict[int, dict] = {}
    task_sql: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    peak_heap: dict[int, int] = {}

    def stage(sid: int) -> dict:
        return stages.setdefault(sid, defaultdict(float))

    for line in _event_lines(path):
        event = json.loads(line)
        kind = event.get("Event", "")
        if kind.endswith("SparkListenerSQLExecutionStart") or kind.endswith("SparkListenerSQLAdaptiveExecutionUpdate"):
            _plan_metrics(event.get("sparkPlanInfo", {}), accumulators)
        elif kind.endswith("SparkListenerSQLAdaptiveSQLMetricUpdates"):
            for metric in event.get("sqlPlanMetrics", []):
                accumulators[int(metric["accumulatorId"])] = ("(adaptive)", metric["name"])
        elif kind == "SparkListenerJobStart":
            description = (event.get("Properties") or {}).get("spark.job.description") or "(no step)"
            for sid in event.get("Stage IDs", []):
                stage_step.setdefault(sid, description)
        elif kind == "SparkListenerTaskEnd":
            sid, metrics = event["Stage ID"], event.get("Task Metrics") or {}
            s = stage(sid)
            s["tasks"] += 1
            s["run_ms"] += metrics.get("Executor Run Time", 0)
            s["cpu_ns"] += metrics.get("Executor CPU Time", 0)
            s["gc_ms"] += metrics.get("JVM GC Time", 0)
            s["spill_memory_bytes"] += metrics.get("Memory Bytes Spilled", 0)
            s["spill_disk_bytes"] += metrics.get("Disk Bytes Spilled", 0)
            s["peak_execution_memory_max"] = max(s["peak_execution_memory_max"],
                                                 metrics.get("Peak Execution Memory", 0))
            write = metrics.get("Shuffle Write Metrics") or {}
            s["shuffle_write_bytes"] += write.get("Shuffle Bytes Written", 0)
            s["shuffle_write_ns"] += write.get("Shuffle Write Time", 0)
            s["shuffle_write_records"] += write.get("Shuffle Records Written", 0)
            read = metrics.get("Shuffle Read Metrics") or {}
            s["shuffle_read_bytes"] += read.get("Local Bytes Read", 0) + read.get("Remote Bytes Read", 0)
            s["shuffle_fetch_wait_ms"] += read.get("Fetch Wait Time", 0)
            s["input_records"] += (metrics.get("Input Metrics") or {}).get("Records Read", 0)
            s["input_bytes"] += (metrics.get("Input Metrics") or {}).get("Bytes Read", 0)
            s["output_records"] += (metrics.get("Output Metrics") or {}).get("Records Written", 0)
            for acc in (event.get("Task Info") or {}).get("Accumulables", []):
                update = acc.get("Update")
                if acc.get("Metadata") == "sql" and update is not None:
                    try:
                        task_sql[sid][int(acc["ID"])] += int(update)
                    except (TypeError, ValueError):
                        pass
        elif kind == "SparkListenerStageCompleted":
            info = event["Stage Info"]
            s = stage(info["Stage ID"])
            s["name"] = info.get("Stage Name", "")
            s["wall_ms"] = (info.get("Completion Time") or 0) - (info.get("Submission Time") or 0)
            s["num_tasks"] = info.get("Number of Tasks", 0)
            s["accumulable_names"] = {int(a["ID"]): a.get("Name", "") for a in info.get("Accumulables", [])}
        elif kind == "SparkListenerStageExecutorMetrics":
            heap = (event.get("Executor Metrics") or {}).get("JVMHeapMemory", 0)
            peak_heap[event["Stage ID"]] = max(peak_heap.get(event["Stage ID"], 0), heap)

    per_stage = []
    for sid in sorted(stages):
        s = stages[sid]
        sql: dict[str, int] = defaultdict(int)
        names = s.pop("accumulable_names", {}) if isinstance(s.get("accumulable_names"), dict) else {}
        for acc_id, value in task_sql.get(sid, {}).items():
            node, metric = accumulators.get(acc_id, (f"(writer) {names.get(acc_id, '?')}", names.get(acc_id, "?")))
            if node.startswith("(writer)"):
                sql[node] += value
            else:
                sql[f"{node}: {metric}"] += value
        per_stage.append({"stage": sid, "step": stage_step.get(sid, "(no step)"), "name": s.get("name", ""),
                          "tasks": int(s.get("tasks", 0)), "wall_ms": int(s.get("wall_ms", 0)),
                          **{k: int(v) for k, v in s.items() if k not in ("name", "wall_ms", "num_tasks", "tasks")},
                          "peak_jvm_heap_bytes": peak_heap.get(sid, 0), "sql": dict(sorted(sql.items()))})
    steps: dict[str, dict] = {}
    for st in per_stage:
        agg = steps.setdefault(st["step"], defaultdict(int))
        agg["stages"] += 1
        for k in ("wall_ms", "run_ms", "cpu_ns", "gc_ms", "spill_memory_bytes", "spill_disk_bytes",
                  "shuffle_write_bytes", "shuffle_read_bytes", "input_records"):
            agg[k] += st.get(k, 0)
        agg["peak_jvm_heap_bytes"] = max(agg["peak_jvm_heap_bytes"], st["peak_jvm_heap_bytes"])
    return {"stages": per_stage, "steps": {k: dict(v) for k, v in steps.items()},
            "peak_jvm_heap_bytes": max(peak_heap.values(), default=0)}


def step_of(stage: dict) -> str:
    """The backfill step of a stage; Delta prefixes the descriptions of its own jobs with "Delta: "."""
    step = stage["step"]
    while step.startswith("Delta: "):
        step = step[len("Delta: "):]
    return step


def _split(stages: list[dict]) -> dict[str, float]:
    """CPU-seconds of one scan-shuffle-aggregate(-write) query by kind of work.

    Spark times some work directly (sort time, shuffle write time, fetch wait: wall clock inside a task); the
    rest of a task's run time is the scan/parse side or the aggregate/write side. Each part is then scaled
    by its stage's CPU/run-time ratio, so time spent waiting for a core on a busy machine drops out.
    Whole-stage-codegen "duration" is not used: it is a pipeline's wall time and nested pipelines overlap.
    """
    work: dict[str, float] = defaultdict(float)
    for st in stages:
        sql = st["sql"]
        run_s = st.get("run_ms", 0) / 1000
        cpu_share = min(1.0, st.get("cpu_ns", 0) / 1e9 / run_s) if run_s else 0.0
        sorts = {k.split(":")[0].lower(): v / 1000 for k, v in sql.items()
                 if k.startswith("Sort by") and k.endswith("sort time")}
        writer_sort = sum(v for k, v in sql.items() if k == "(writer) sort time") / 1000
        shuffle_write = st.get("shuffle_write_ns", 0) / 1e9
        fetch_wait = st.get("shuffle_fetch_wait_ms", 0) / 1000
        part: dict[str, float] = defaultdict(float)
        if not st.get("shuffle_read_bytes"):
            for node, sec in sorts.items():
                part[f"map-side {node}"] += sec
            part["map side: scan, parse, filter (+ partial aggregate)"] += max(run_s - sum(sorts.values()) - shuffle_write, 0)
        else:
            for node, sec in sorts.items():
                part[f"reduce-side {node}"] += sec
            part["shuffle read (fetch wait)"] += fetch_wait
            rest = max(run_s - sum(sorts.values()) - writer_sort - fetch_wait - shuffle_write, 0)
            part["aggregate + Delta write" if "(writer) task commit time" in sql else "aggregate"] += rest
        if shuffle_write:
            part["shuffle write"] += shuffle_write
        if writer_sort:
            part["Delta writer's sort by event_date"] += writer_sort
        for name, sec in part.items():
            work[name] += sec * cpu_share
        work["(task run time, wall)"] += run_s
        work["(JVM GC, wall)"] += st.get("gc_ms", 0) / 1000
    return dict(work)


def tiles_breakdown(result: dict) -> dict[str, float]:
    """Where the tiles step [2/5] goes, in CPU-seconds summed over cores; the `noop` probe of the same query
    (no Delta write) splits "aggregate + Delta write" into its two parts."""
    stages = (result.get("spark") or {}).get("stages", [])
    work = _split([s for s in stages if step_of(s).startswith("[2/5]")])
    probe = _split([s for s in stages if step_of(s) == f"{PROBE} tiles, no write"])
    if "aggregate + Delta write" in work and "aggregate" in probe:
        both = work.pop("aggregate + Delta write")
        work["aggregate (from the noop probe)"] = min(probe["aggregate"], both)
        work["Delta write: encode, stats, files"] = max(both - probe["aggregate"], 0)
    notes = {k: work.pop(k) for k in ("(task run time, wall)", "(JVM GC, wall)") if k in work}
    work["= CPU-seconds"] = sum(work.values())
    work.update(notes)
    return {k: round(v, 2) for k, v in work.items()}


def partial_aggregation(result: dict) -> dict[str, int]:
    """Rows into and out of the map-side partial aggregate of the tiles step (the hash strategy's)."""
    stages = [s for s in (result.get("spark") or {}).get("stages", [])
              if step_of(s).startswith("[2/5]") and not s.get("shuffle_read_bytes")]
    rows_in = sum(v for s in stages for k, v in s["sql"].items() if k == "Filter: number of output rows")
    rows_out = sum(s.get("shuffle_write_records", 0) for s in stages)
    return {"rows_in": rows_in, "rows_shuffled": rows_out}


def parse_breakdown(result: dict) -> dict[str, float]:
    """CPU-seconds of the scan / parse probes: what the JSON parse and the pushed-down filter cost."""
    stages = (result.get("spark") or {}).get("stages", [])
    seconds = {name: sum(s["cpu_ns"] for s in stages if step_of(s) == f"{PROBE} {name}") / 1e9
               for name in ("scan", "scan + parse", "scan + parse + filter")}
    if not all(seconds.values()):
        return {}
    return {"scan (read Parquet, value bytes)": round(seconds["scan"], 2),
            "parse (from_json x2, regex, casts)": round(seconds["scan + parse"] - seconds["scan"], 2),
            "filter error IS NULL, pushed into the parse (parses again)":
                round(seconds["scan + parse + filter"] - seconds["scan + parse"], 2)}


def step_cpu(result: dict) -> dict[str, float]:
    """Task CPU-seconds per backfill step (probes excluded)."""
    cpu: dict[str, float] = defaultdict(float)
    for s in (result.get("spark") or {}).get("stages", []):
        step = step_of(s)
        if step.startswith("[") and not step.startswith(PROBE):
            cpu[step.split("]")[0] + "]"] += s.get("cpu_ns", 0) / 1e9
    return {k: round(v, 1) for k, v in sorted(cpu.items())}
