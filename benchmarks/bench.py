"""On one generated dataset: (A) streaming-only from the earliest offsets, (B) switchyard: backfill + handoff +
stream of the tail, (C) batch-only: one aggregation over everything (state alone, and every table B writes).
Each arm runs in a fresh process (benchmarks/bench_arms.py) while the parent samples its memory; all must end in
identical keyed state. The goals say which figures meet their targets."""

from __future__ import annotations

import argparse
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from benchmarks.harness import add_connection, bar_chart, machine, run_fresh, worker_command, write_json
from switchyard.state_handoff.errors import UserError

#: Every run of a full bench, by label, in the order they run.
RUNS = {"C": "batch_only", "C-full": "batch_full", "B": "switchyard", "A": "streaming_only", "B-hash": "backfill_hash"}
ARMS = tuple(RUNS)


@dataclass
class Run:
    mode: str
    seconds: float
    records: int
    peak_jvm_mb: float
    peak_python_mb: float
    stages: dict = field(default_factory=dict)
    peak_jvm_anon_mb: float = 0.0  # the JVM's anonymous memory at its own peak (RSS less mapped files)
    peak_jvm_at: dict = field(default_factory=dict)  # at the RSS peak: seconds into the run, anon and file MB

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


def _run(mode: str, warehouse: str, bootstrap: str, topic: str, max_offsets: int, log: Path) -> Run:
    arm = run_fresh(worker_command("bench_arms", mode, warehouse, bootstrap, topic, max_offsets), log)
    if arm.returncode != 0:
        raise RuntimeError(f"bench worker {mode} failed ({arm.returncode}); see {log}")
    figures = arm.figures()
    return Run(mode, figures["seconds"], 0, round(arm.memory.peak_jvm_mb), round(arm.memory.peak_python_mb),
               figures["stages"], round(arm.memory.peak_jvm_anon_mb), arm.memory.peak_jvm_at)


def _state_checksum(spark, warehouse: str) -> tuple:
    from pyspark.sql import functions as F

    state = spark.read.format("delta").load(f"{warehouse}/demo/state")
    row = state.agg(F.count("*"), F.sum("event_count"), F.sum(F.hash("key", "event_count", "amount_min", "amount_max",
                                                                         "last_event_time", "last_amount").cast("long")),
                    F.sum("amount_sum")).first()
    return tuple(row)


def versions() -> dict:
    """The Spark the bench ran on (pyspark's) and the Delta of its fetched jars (None when no Delta jar is there)."""
    import pyspark

    from switchyard.deploy.jars import artifact_name, fetched_jars

    delta = next((j.name[len(artifact_name(j)) + 1:-len(".jar")] for j in fetched_jars("spark")
                  if artifact_name(j).startswith("delta-spark")), None)
    return {"spark_version": pyspark.__version__, "delta_version": delta}


def states_identical(warehouses: list[str]) -> tuple[bool, list]:
    from switchyard.deploy.spark import build_spark

    spark = build_spark("switchyard-bench-compare")
    sums = [_state_checksum(spark, w) for w in warehouses]
    first = sums[0]
    same = all(s[:3] == first[:3] and abs(s[3] - first[3]) <= 1e-6 * max(1.0, abs(first[3])) for s in sums)
    spark.stop()
    return same, sums


def _topic(bootstrap: str, topic: str, events: int, keys: int, partitions: int, days: int, seed: int, out) -> dict:
    """The bench's topic generated unless it already holds the events; the generator's figures when it ran."""
    from switchyard.jobs.inputs.generate import run_generate
    from switchyard.state_handoff.io.kafka_io import offset_bounds, partitions_of

    try:
        present = sum(hi - lo for lo, hi in offset_bounds(bootstrap, topic).values())
    except UserError:
        present = 0
    if present == events:
        generated = {"generate_s": None, "generate_events_per_s": None}  # the topic was there: not timed
    else:
        if present:
            raise UserError(f"topic {topic} holds {present} records, not {events}: delete it or pick another --seed")
        out(f"generating {events:,} events into {topic}")
        started = time.monotonic()
        run_generate(bootstrap, topic, events=events, keys=keys, partitions=partitions, days=days, seed=seed,
                     malformed_rate=0.001)
        generated = {"generate_s": round(time.monotonic() - started, 3),
                     "generate_events_per_s": round(events / (time.monotonic() - started))}
    assert len(partitions_of(bootstrap, topic)) == partitions
    return generated


def _archive(bootstrap: str, topic: str, fraction: float, warehouses: dict[str, str]) -> float:
    """Archive `fraction` of the topic once, copied to every arm that reads an archive; its seconds."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    spark = build_spark("switchyard-bench-archive")
    started = time.monotonic()
    cut = archive_cut(bootstrap, topic, fraction=fraction)
    run_archive(spark, get_pipeline("demo"), Tables(warehouses["switchyard"], "demo"), bootstrap, topic, cut,
                out=lambda *_: None)
    seconds = time.monotonic() - started
    spark.stop()
    for mode in ("batch_only", "batch_full", "backfill_hash"):
        shutil.copytree(Tables(warehouses["switchyard"], "demo").archive, Tables(warehouses[mode], "demo").archive)
    return seconds


def run_bench(bootstrap: str, events: int, keys: int, partitions: int, fraction: float, json_file: str,
              out_dir: str = "bench-out", seed: int = 42, days: int = 7, max_offsets: int = 1_000_000,
              latency_seconds: float = 20.0, arms: tuple[str, ...] = ARMS, out=print) -> dict:
    from switchyard.deploy.spark import spark_master

    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise UserError(f"--arms {','.join(arms)}: name some of {', '.join(ARMS)}")
    if events < 1000 or not 0 < fraction < 1:
        raise UserError("--events must be at least 1000 and --archived-fraction strictly between 0 and 1")
    base = Path(out_dir).resolve() / f"n{events}-k{keys}-p{partitions}-s{seed}"
    topic = f"bench.n{events}.k{keys}.p{partitions}.s{seed}"
    log = base / "workers.log"
    base.mkdir(parents=True, exist_ok=True)
    generated = _topic(bootstrap, topic, events, keys, partitions, days, seed, out)

    fresh = {}
    for mode in RUNS.values():
        shutil.rmtree(base / mode, ignore_errors=True)
        fresh[mode] = str(base / mode)
    out("archiving (timed separately: it stands in for a sink that already exists)")
    archive_s = _archive(bootstrap, topic, fraction, fresh)

    runs = {}
    for label, mode in RUNS.items():
        if label not in arms:
            continue
        out(f"running {label} ({mode})")
        runs[mode] = _run(mode, fresh[mode], bootstrap, topic, max_offsets, log)
        runs[mode].records = events
        out(f"  {mode}: {runs[mode].seconds:.1f}s {runs[mode].stages}")
    compared = [m for m in ("streaming_only", "switchyard", "batch_only", "batch_full") if m in runs]
    identical, sums = states_identical([fresh[m] for m in compared]) if len(compared) > 1 else (None, [])
    result = {"events": events, "keys": keys, "partitions": partitions, "archived_fraction": fraction,
              "machine": machine(), "spark_master": spark_master(), **versions()}
    figures = {"states_identical": identical, "state_checksums": [list(map(str, s)) for s in sums],
               "runs": {m: {**asdict(r), "records_per_s": round(r.records_per_s)} for m, r in runs.items()}}
    if set(arms) != set(ARMS):
        result.update({"arms": list(arms), "archive_s": round(archive_s, 3), **generated,
                       **{f"{m}_s": r.seconds for m, r in runs.items()}, **_ratios(runs), **figures})
        result["goals"] = goals(result)
        write_json(json_file, result)
        for mode, r in runs.items():
            out(f"{mode:<16} {r.seconds:>8.1f}s {r.records_per_s:>11,.0f} records/s  JVM {r.peak_jvm_mb} MB "
                f"(anonymous {r.peak_jvm_anon_mb} MB; at the peak {r.peak_jvm_at})  "
                f"on {spark_master()}, Spark {result['spark_version']}")
        out(goals_table(result["goals"]))
        if identical is False:
            raise RuntimeError(f"the runs ended in different keyed state: {sums}")
        return result

    latency = None
    if latency_seconds > 0:
        from benchmarks.latency import run_latency_bench

        out("measuring steady-state stream latency at 1000 events/s")
        shutil.rmtree(base / "latency", ignore_errors=True)  # the archive grows per topic; each run has its own
        report = run_latency_bench(str(base / "latency"), bootstrap, [1000], latency_seconds, out=lambda *_: None)
        latency = asdict(report)
    b = runs["switchyard"]
    result.update({
        "archive_s": round(archive_s, 3), **generated,
        "streaming_only_s": runs["streaming_only"].seconds, "switchyard_s": b.seconds,
        "batch_only_s": runs["batch_only"].seconds, "batch_full_s": runs["batch_full"].seconds, **_ratios(runs),
        **figures,
        "backfill_sort_s": b.stages.get("backfill_tiles"),
        "backfill_hash_s": runs["backfill_hash"].stages.get("backfill_tiles"),
        "latency": latency,
    })
    result["goals"] = goals(result)
    write_json(json_file, result)
    _chart(result, Path(json_file).with_suffix(".png"))
    out(_table(result))
    if not identical:
        raise RuntimeError(f"A, B and C ended in different keyed state: {sums}")
    return result


def _ratios(runs: dict) -> dict:
    """The goals' ratios among the arms that ran (all of them, or some of them with `--arms`), and B's stream
    stage."""
    pairs = {"ratio_streaming_over_switchyard": ("streaming_only", "switchyard"),
             "ratio_switchyard_over_batch": ("switchyard", "batch_only"),
             "ratio_switchyard_over_batch_full": ("switchyard", "batch_full")}
    ratios = {name: round(runs[a].seconds / runs[b].seconds, 3) for name, (a, b) in pairs.items()
              if a in runs and b in runs}
    if "switchyard" in runs:
        ratios["switchyard_stream_stage_s"] = runs["switchyard"].stages.get("stream")
    return ratios


#: The goals of one bench run: (name, what it measures, comparison, target).
GOALS = (
    ("streaming_over_switchyard", "A streaming-only / B switchyard", ">=", 2.5),  # FLIP-327's prototype: 2.5
    ("switchyard_over_batch_full", "B switchyard / C writing every table", "<=", 1.10),
    ("switchyard_stream_stage_s", "B's stream stage, s", "<=", 8.0),
    ("latency_p50_s", "update latency p50 at 1,000 events/s, s", "<=", 1.0),
    ("latency_p99_s", "update latency p99 at 1,000 events/s, s", "<=", 1.0),
    ("switched_s", "`stream` launched -> SWITCHED, JVM start included, s", "<=", 10.0),
    ("switched_in_process_s", "the stream process's own start -> SWITCHED, s", "<=", 3.0),
    ("generate_events_per_s", "`generate` events/s", ">=", 200_000),
)


def goals(result: dict) -> dict:
    """Each goal's figure in `result` (a bench's JSON), its target and whether it was met; figure and verdict are
    null where this run did not measure it (an arm left out, no latency run, a topic that was already there)."""
    latency = result.get("latency") or {}
    at_1000 = next((r for r in latency.get("results", []) if r["rate"] == 1000), None)
    figures = {
        "streaming_over_switchyard": result.get("ratio_streaming_over_switchyard"),
        "switchyard_over_batch_full": result.get("ratio_switchyard_over_batch_full"),
        "switchyard_stream_stage_s": result.get("switchyard_stream_stage_s"),
        "latency_p50_s": at_1000 and round(at_1000["p50_ms"] / 1000, 3),
        "latency_p99_s": at_1000 and round(at_1000["p99_ms"] / 1000, 3),
        "switched_s": latency.get("seconds_to_switched") and round(latency["seconds_to_switched"], 3),
        "switched_in_process_s": latency.get("switched_in_process_s"),
        "generate_events_per_s": result.get("generate_events_per_s"),
    }
    verdicts = {}
    for name, measures, op, target in GOALS:
        figure = figures[name]
        met = None if figure is None else (figure >= target if op == ">=" else figure <= target)
        verdicts[name] = {"measures": measures, "figure": figure, "target": f"{op} {target:,g}", "met": met}
    return verdicts


def goals_table(verdicts: dict) -> str:
    lines = ["goals:"]
    for goal in verdicts.values():
        figure = goal["figure"]
        figure = ("not measured" if figure is None else f"{figure:,.0f}" if figure >= 1000 else f"{figure:.2f}")
        verdict = "" if goal["met"] is None else ("met" if goal["met"] else "MISSED")
        lines.append(f"  {goal['measures']:<55} {figure:>12} (goal {goal['target']}) {verdict}")
    return "\n".join(lines)


def _table(result: dict) -> str:
    lines = [f"switchyard bench: {result['events']:,} events, {result['keys']:,} keys, {result['partitions']} partitions, "
             f"{result['archived_fraction']:.0%} archived ({result['machine']}, Spark {result['spark_version']}); "
             f"archive {result['archive_s']:.1f}s",
             f"{'run':<22} {'wall s':>8} {'records/s':>11} {'JVM MB':>8} {'Python MB':>10}"]
    for mode, label in (("streaming_only", "A streaming-only"), ("switchyard", "B switchyard"),
                        ("batch_only", "C batch-only"), ("batch_full", "C, every table"),
                        ("backfill_hash", "B's backfill, hash")):
        r = result["runs"][mode]
        lines.append(f"{label:<22} {r['seconds']:>8.1f} {r['records_per_s']:>11,} {r['peak_jvm_mb']:>8.0f} "
                     f"{r['peak_python_mb']:>10.0f}")
    lines.append(f"A/B = {result['ratio_streaming_over_switchyard']:.2f}   B/C = {result['ratio_switchyard_over_batch']:.2f}"
                 f"   states identical: {result['states_identical']}")
    lines.append(f"B/C with C writing every table B writes (state, windows, dead letters): "
                 f"{result['ratio_switchyard_over_batch_full']:.2f}")
    lines.append(f"B's backfill tiles: sort {result['backfill_sort_s']}s vs hash {result['backfill_hash_s']}s")
    if result["latency"]:
        r = result["latency"]["results"][0]
        lines.append(f"stream latency at {r['rate']}/s: p50 {r['p50_ms']:.0f} ms, p99 {r['p99_ms']:.0f} ms")
    lines.append(goals_table(result["goals"]))
    return "\n".join(lines)


def _chart(result: dict, path: Path) -> None:
    bar_chart(path, ["A streaming-only", "B switchyard", "C batch-only", "C, every table"],
              [result["streaming_only_s"], result["switchyard_s"], result["batch_only_s"], result["batch_full_s"]],
              ["#b0b0b0", "#2a7ab9", "#6fbf73", "#a9d8ab"], "wall time to an up-to-date keyed state (s)",
              f"{result['events']:,} events: A/B = {result['ratio_streaming_over_switchyard']:.2f}, "
              f"B/C = {result['ratio_switchyard_over_batch']:.2f}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks bench", description=__doc__)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--archived-fraction", type=float, default=0.99)
    parser.add_argument("--json", dest="json_file", required=True, metavar="FILE")
    parser.add_argument("--out-dir", default="bench-out", help="where the three runs keep their tables")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1_000_000,
                        help="the streaming runs' batch cap, tuned for catch-up")
    parser.add_argument("--latency-seconds", type=float, default=20.0, help="0 skips the latency measurement")
    parser.add_argument("--arms", default="C,C-full,B,A,B-hash",
                        help="which runs, comma-separated (default all: C, C-full, B, A, B-hash); e.g. B alone to "
                             "time the switch on a cluster")
    add_connection(parser)
    args = parser.parse_args(argv)
    run_bench(args.bootstrap, args.events, args.keys, args.partitions, args.archived_fraction, args.json_file,
              out_dir=args.out_dir, max_offsets=args.max_offsets_per_trigger, latency_seconds=args.latency_seconds,
              arms=tuple(a.strip() for a in args.arms.split(",") if a.strip()))
    return 0
