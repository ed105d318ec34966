"""Backfill benchmark: the sort-based tiles aggregation (the default) against Spark's groupBy().agg ("hash").

    .venv/bin/python -m benchmarks sort-vs-hash --events 1000000 [--keys 100000] [--days 7] [--json out.json]

Builds a synthetic archive straight to Parquet (the columns `switchyard archive` writes; no Kafka), then runs
`run_backfill` once per strategy, each in a fresh Python + JVM under SWITCHYARD_DRIVER_MEMORY (2g), over its own
tables next to the one archive. Per run: wall time and task CPU per backfill step, records/s, peak RSS of the JVM
and of Python, the JVM heap, spill, and a breakdown of the tiles step from the Spark event log (scan+parse,
shuffle, sort, aggregate, Delta write); `noop`-sink probes after the timed run split parse from filter and
aggregate from write. Last, the runs' `state`, `windows` and `window_state` must agree row for row, or exit 1.

Both strategies run Spark's SortAggregate: the `last` partial is a max over a struct, a buffer Spark's hash
aggregation cannot hold, so "hash" means Spark's own plan (sort + partial aggregate before the shuffle) and
"sort" means repartition by key, one sort, one pass per group.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path

from benchmarks.backfill_profile import (PROBE, event_log_breakdown, parse_breakdown, partial_aggregation, step_cpu,
                                         step_of, tiles_breakdown)
from benchmarks.backfill_runs import PIPELINE, STRATEGIES, compare_worker, run_worker
from benchmarks.harness import MB, ROOT, run_fresh, scenario_command
from benchmarks.synthetic_archive import archive_is_current, archive_params, build_archive


def _subprocess(argv: list[str], env: dict, log: Path):
    """A worker in a fresh process, its output echoed: (exit code, its memory, wall seconds)."""
    log.unlink(missing_ok=True)
    arm = run_fresh(argv, log, env=env, echo="   ")
    return arm.returncode, arm.memory, arm.seconds


def _worker_argv(*extra: str) -> list[str]:
    return scenario_command("sort-vs-hash", *extra)


def run_strategy(args, out_dir: Path, strategy: str) -> dict:
    run_dir = out_dir / "runs" / strategy
    if run_dir.exists():
        shutil.rmtree(run_dir)
    (run_dir / "warehouse" / PIPELINE).mkdir(parents=True)
    # Every run gets fresh tables next to a link to the one archive.
    os.symlink(out_dir / "warehouse" / PIPELINE / "archive", run_dir / "warehouse" / PIPELINE / "archive")
    env = {**os.environ, "SWITCHYARD_DRIVER_MEMORY": args.driver_memory, "PYTHONUNBUFFERED": "1"}
    env.pop("SWITCHYARD_SPARK_PROFILE", None)
    result_file = run_dir / "result.json"
    argv = _worker_argv("--worker", "run", "--strategy", strategy, "--run-dir", str(run_dir),
                        "--result", str(result_file), "--events", str(args.events))
    if args.shuffle_partitions:
        argv += ["--shuffle-partitions", str(args.shuffle_partitions)]
    if not args.no_probes:
        argv += ["--probes"]
    print(f"\n== {strategy}: fresh JVM, SWITCHYARD_DRIVER_MEMORY={args.driver_memory}", flush=True)
    code, sampler, process_s = _subprocess(argv, env, run_dir / "stderr.log")
    result = json.loads(result_file.read_text()) if result_file.exists() else {
        "strategy": strategy, "events": args.events, "finished": False}
    result["exit_code"] = code
    result["process_wall_s"] = round(process_s, 2)
    if code and "error" not in result:
        tail = (run_dir / "stderr.log").read_text(errors="replace").strip().splitlines()[-15:]
        result["error"] = "\n".join(tail)
    # The worker reads the kernel's high-water marks right after the backfill (before the probes); the sampler
    # stands in when the worker died first.
    result["peak_jvm_rss_bytes"] = (result.get("jvm") or {}).get("vm_hwm_bytes") or sampler.peak_of("java")
    result["peak_python_rss_bytes"] = result.get("python_vm_hwm_bytes") or sampler.peak_of("driver-python")
    result["python_worker_processes"] = sampler.python_workers
    (run_dir / "result.json").write_text(json.dumps(result, indent=2, default=str))
    return derived_figures(result, args.driver_memory)


def derived_figures(result: dict, driver_memory: str) -> dict:
    timed = [s for s in (result.get("spark") or {}).get("stages", []) if not step_of(s).startswith(PROBE)]
    result["spill_bytes"] = sum(s.get("spill_memory_bytes", 0) for s in timed)
    result["spill_disk_bytes"] = sum(s.get("spill_disk_bytes", 0) for s in timed)
    result["shuffle_write_bytes"] = sum(s.get("shuffle_write_bytes", 0) for s in timed)
    result["task_cpu_s"] = round(sum(s.get("cpu_ns", 0) for s in timed) / 1e9, 1)
    result["task_run_s"] = round(sum(s.get("run_ms", 0) for s in timed) / 1000, 1)
    result["peak_heap_used_bytes"] = max((s.get("peak_jvm_heap_bytes", 0) for s in timed), default=0)
    result["tiles_breakdown_cpu_s"] = tiles_breakdown(result)
    result["parse_breakdown_cpu_s"] = parse_breakdown(result)
    result["partial_aggregation"] = partial_aggregation(result)
    result["step_task_cpu_s"] = step_cpu(result)
    max_heap = (result.get("jvm") or {}).get("max_heap_bytes", 0)
    result["under_heap_limit"] = bool(result.get("finished")) and 0 < max_heap <= _bytes(driver_memory)
    return result


def _bytes(text: str) -> int:
    number, unit = re.fullmatch(r"(\d+)([kmgt]?)b?", text.strip().lower()).groups()
    return int(number) * 1024 ** " kmgt".index(unit or " ")


def _table(headers: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in row] for row in [headers, *rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in cells]
    return "\n".join([lines[0], "  ".join("-" * w for w in widths), *lines[1:]])


def _mb(value) -> str:
    return f"{value / MB:,.0f}" if value else "-"


def report(runs: list[dict], comparison: dict | None) -> str:
    lines: list[str] = []
    out = lines.append
    out(_table(
        ["strategy", "events", "wall s", "records/s", "peak JVM RSS MB", "peak Python RSS MB", "peak heap used MB",
         "max heap MB", "spill bytes (mem)", "spill bytes (disk)", "shuffle write MB", "JVM cpu s", "task cpu s",
         "task run s", "ok under heap"],
        [[r["strategy"], f"{r['events']:,}", f"{r['wall_s']:.1f}" if r.get("finished") else "FAILED",
          f"{r['records_per_s']:,.0f}" if r.get("finished") else "-",
          _mb(r.get("peak_jvm_rss_bytes")), _mb(r.get("peak_python_rss_bytes")), _mb(r.get("peak_heap_used_bytes")),
          _mb((r.get("jvm") or {}).get("max_heap_bytes")), f"{r.get('spill_bytes', 0):,}",
          f"{r.get('spill_disk_bytes', 0):,}", _mb(r.get("shuffle_write_bytes")),
          (r.get("jvm") or {}).get("cpu_s", "-"), r.get("task_cpu_s", "-"),
          r.get("task_run_s", "-"), "yes" if r.get("under_heap_limit") else "NO"] for r in runs]))
    by = {r["strategy"]: r for r in runs}
    if all(by.get(s, {}).get("finished") for s in STRATEGIES):
        out(f"\nratio hash/sort wall time: {by['hash']['wall_s'] / by['sort']['wall_s']:.3f} (> 1: sort is faster)")
        cpu = [(by[s].get("jvm") or {}).get("cpu_s") for s in ("hash", "sort")]
        if all(cpu):
            out(f"ratio hash/sort JVM CPU seconds: {cpu[0] / cpu[1]:.3f} (user + system time of the JVM process)")
    for r in runs:
        load = r.get("load_average")
        if load:
            out(f"{r['strategy']}: load average before {load['before'][0]:.1f}, after {load['after'][0]:.1f} "
                f"on {os.cpu_count()} cpus; PySpark Python workers seen: {r.get('python_worker_processes', 0)}")
    steps = sorted({s["step"] for r in runs for s in r.get("steps", [])})
    if steps:
        out("\nper backfill step: wall seconds / task CPU-seconds")
        out(_table(["step", *[r["strategy"] for r in runs]],
                   [[step, *[next((f"{s['wall_s']:.1f} / {r.get('step_task_cpu_s', {}).get(step, 0):.1f}"
                                   for s in r.get("steps", []) if s["step"] == step), "-") for r in runs]]
                    for step in steps if step != "[0/5]"]))
    kinds = list(dict.fromkeys(k for r in runs for k in r.get("tiles_breakdown_cpu_s", {})))
    if kinds:
        out("\nwhere the tiles step [2/5] goes (CPU-seconds summed over cores; timed parts scaled by CPU/run)")
        out(_table(["work", *[r["strategy"] for r in runs]],
                   [[k, *[f"{r.get('tiles_breakdown_cpu_s', {}).get(k, 0):.1f}" for r in runs]] for k in kinds]))
        for r in runs:
            partial = r.get("partial_aggregation") or {}
            if partial.get("rows_in"):
                out(f"{r['strategy']}: {partial['rows_in']:,} well-formed rows into the map side, "
                    f"{partial['rows_shuffled']:,} rows shuffled "
                    f"({partial['rows_in'] / max(partial['rows_shuffled'], 1):.2f}x reduction)")
    parse = next((r["parse_breakdown_cpu_s"] for r in runs if r.get("parse_breakdown_cpu_s")), None)
    if parse:
        out("\nthe parse, from the noop probes (CPU-seconds; the same for both strategies, measured once)")
        out(_table(["work", "cpu s"], [[k, f"{v:.1f}"] for k, v in parse.items()]))
    probes = [r for r in runs if r.get("probes")]
    if probes:
        out("\nprobe wall seconds (noop sink, warm JVM): " + "; ".join(
            f"{r['strategy']}: " + ", ".join(f"{k} {v:.1f}" for k, v in r["probes"].items()) for r in probes))
    for r in runs:
        tiles = [s for s in (r.get("spark") or {}).get("stages", []) if step_of(s).startswith("[2/5]")]
        if tiles:
            out(f"\n{r['strategy']}: stages of the tiles step")
            out(_table(["stage", "tasks", "wall s", "task s", "cpu s", "gc s", "input rows", "shuffle w MB",
                        "shuffle r MB", "spill MB", "peak heap MB"],
                       [[s["stage"], s["tasks"], f"{s['wall_ms'] / 1000:.1f}", f"{s['run_ms'] / 1000:.1f}",
                         f"{s['cpu_ns'] / 1e9:.1f}", f"{s['gc_ms'] / 1000:.1f}", f"{s['input_records']:,}",
                         _mb(s["shuffle_write_bytes"]), _mb(s["shuffle_read_bytes"]), _mb(s["spill_memory_bytes"]),
                         _mb(s["peak_jvm_heap_bytes"])] for s in tiles]))
        if r.get("error"):
            out(f"\n{r['strategy']} FAILED: {r['error'][:1500]}")
    if comparison is not None:
        out("\nsort vs hash results: " + ", ".join(
            f"{name} {'identical' if c['identical'] else 'DIFFERENT'} "
            f"({next(iter(c['checksums'].values()))['rows']:,} rows, {c['mismatched_rows']} mismatched)"
            for name, c in comparison.items()))
    return "\n".join(lines)


def print_saved_report(args, out_dir: Path, strategies: list[str]) -> int:
    runs = []
    for strategy in strategies:
        result = json.loads((out_dir / "runs" / strategy / "result.json").read_text())
        if result.get("event_log"):
            result["spark"] = event_log_breakdown(Path(result["event_log"]))
        runs.append(derived_figures(result, args.driver_memory))
    compare_file = out_dir / "runs" / "compare.json"
    print(report(runs, json.loads(compare_file.read_text()) if compare_file.exists() else None))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks sort-vs-hash", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, help="how many archived records (required)")
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--partitions", type=int, default=4, help="Kafka partitions of the synthetic archive")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--malformed-rate", type=float, default=0.01)
    parser.add_argument("--out-dir", help="benchmark warehouse (default ./bench-out/backfill/<events>)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--driver-memory", default="2g", help="SWITCHYARD_DRIVER_MEMORY of each run (default 2g)")
    parser.add_argument("--shuffle-partitions", type=int, help="override the profile's spark.sql.shuffle.partitions")
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--rebuild-archive", action="store_true")
    parser.add_argument("--no-probes", action="store_true",
                        help="skip the noop-sink probes run after each timed backfill (they split parse, "
                             "aggregate and Delta write)")
    parser.add_argument("--probes", action="store_true", help=argparse.SUPPRESS)  # a worker's switch
    parser.add_argument("--report-only", action="store_true",
                        help="re-read the last runs' results and event logs under --out-dir and print the report")
    parser.add_argument("--worker", choices=["archive", "run", "compare"], help=argparse.SUPPRESS)
    parser.add_argument("--strategy", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--runs-dir", help=argparse.SUPPRESS)
    parser.add_argument("--archive", help=argparse.SUPPRESS)
    parser.add_argument("--params", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker == "run":
        return run_worker(args)
    if args.worker == "compare":
        return compare_worker(args)
    if args.worker == "archive":
        info = build_archive(Path(args.archive), json.loads(args.params))
        Path(args.result).write_text(json.dumps(info))
        return 0

    if args.events is None:
        parser.error("--events is required")
    if args.events < 1 or args.keys < args.partitions or args.days < 1:
        parser.error("--events and --days must be at least 1 and --keys at least --partitions")
    strategies = [s for s in args.strategies.split(",") if s]
    if not set(strategies) <= set(STRATEGIES):
        parser.error(f"--strategies takes a comma list of {', '.join(STRATEGIES)}")
    out_dir = Path(args.out_dir or ROOT / "bench-out" / "backfill" / str(args.events)).resolve()
    archive = out_dir / "warehouse" / PIPELINE / "archive"
    params = archive_params(args)
    if args.report_only:
        return print_saved_report(args, out_dir, strategies)
    figures: dict = {"params": params, "driver_memory": args.driver_memory, "out_dir": str(out_dir),
                     "started_at": datetime.now(UTC).isoformat(timespec="seconds"), "host_cpus": os.cpu_count()}
    if args.rebuild_archive or not archive_is_current(archive, params):
        print(f"== building the archive: {args.events:,} events, {args.keys:,} keys, {args.days} days -> {archive}",
              flush=True)
        archive.parent.mkdir(parents=True, exist_ok=True)
        info_file = out_dir / "archive-build.json"
        code, _, seconds = _subprocess(_worker_argv("--worker", "archive", "--archive", str(archive), "--params",
                                                    json.dumps(params), "--result", str(info_file)),
                                       {**os.environ, "SWITCHYARD_DRIVER_MEMORY": "4g"}, out_dir / "archive-build.log")
        if code:
            print(f"building the archive failed; see {out_dir / 'archive-build.log'}", file=sys.stderr)
            return 1
        figures["archive"] = {**json.loads(info_file.read_text()), "reused": False, "process_wall_s": round(seconds, 1)}
    else:
        files = glob.glob(str(archive / "event_date=*" / "*.parquet"))
        figures["archive"] = {"reused": True, "files": len(files), "bytes": sum(os.path.getsize(f) for f in files)}
    print(f"== archive: {figures['archive']['files']} files, {figures['archive']['bytes'] / MB:,.0f} MB"
          f"{' (reused)' if figures['archive']['reused'] else ''}", flush=True)

    runs = [run_strategy(args, out_dir, s) for s in strategies]
    figures["runs"] = runs
    comparison = None
    if len(strategies) == 2 and all(r.get("finished") for r in runs):
        print("\n== comparing the state tables", flush=True)
        compare_file = out_dir / "runs" / "compare.json"
        code, _, _ = _subprocess(_worker_argv("--worker", "compare", "--runs-dir", str(out_dir / "runs"),
                                              "--strategies", ",".join(strategies), "--result", str(compare_file)),
                                 dict(os.environ), out_dir / "runs" / "compare.log")
        comparison = json.loads(compare_file.read_text()) if compare_file.exists() else {
            "state": {"identical": False, "checksums": {"?": {"rows": 0}}, "mismatched_rows": -1, "examples": []}}
        figures["comparison"] = comparison
    by = {r["strategy"]: r for r in runs}
    if all(by.get(s, {}).get("finished") for s in STRATEGIES):
        figures["ratio_hash_over_sort_wall"] = round(by["hash"]["wall_s"] / by["sort"]["wall_s"], 4)
        cpu = [(by[s].get("jvm") or {}).get("cpu_s") for s in ("hash", "sort")]
        if all(cpu):
            figures["ratio_hash_over_sort_jvm_cpu"] = round(cpu[0] / cpu[1], 4)
    text = report(runs, comparison)
    print("\n" + text)
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2, default=str))
        print(f"\nfigures written to {args.json}")
    if comparison is not None and not all(c["identical"] for c in comparison.values()):
        print("\nFAIL: the strategies produced different results (see the comparison above)", file=sys.stderr)
        return 1
    if not all(r.get("finished") for r in runs):
        print("\nFAIL: a run did not finish", file=sys.stderr)
        return 1
    return 0
