"""`switchyard bench`: on one generated dataset, (A) streaming-only from the earliest offsets, (B) switchyard:
backfill + handoff + stream of the tail, (C) batch-only: one aggregation over everything. Each runs in a fresh
process (its own JVM) while the parent samples memory; all three must end in identical keyed state."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from state_handoff.errors import UserError
from state_handoff.kafka_security import spark_source_options

ROOT = Path(__file__).resolve().parents[1]
MODES = {"A": "streaming_only", "B": "switchyard", "C": "batch_only"}
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

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds else 0.0


# ---------------------------------------------------------------- workers (run in their own process)

def _empty_start(spark, pipeline, tables, topic: str) -> None:
    """Streaming-only: no archive, empty state, a handoff at the earliest offsets of every partition."""
    from jobs.aggregation import state_from_partials, tiles_from_events, window_partials_from_tiles
    from state_handoff import handoff_log
    from state_handoff.archive_files import write_archive_meta
    from state_handoff.parsing import parse_events

    nothing = spark.createDataFrame([], "kafka_partition INT, kafka_offset BIGINT, value BINARY")
    tiles = tiles_from_events(pipeline, parse_events(pipeline, nothing), "hash")
    state_from_partials(pipeline, tiles).write.format("delta").mode("overwrite").save(tables.state)
    if pipeline.windows is not None:
        windows = window_partials_from_tiles(pipeline, tiles)
        windows.write.format("delta").mode("overwrite").save(tables.windows)
        windows.write.format("delta").mode("overwrite").save(tables.window_state)
    os.makedirs(tables.archive, exist_ok=True)
    write_archive_meta(tables.archive, {"topic": topic, "cut": {}, "first": {}, "records": 0})
    handoff_id = handoff_log.new_handoff_id()
    handoff_log.append(spark, tables, handoff_id, handoff_log.BACKFILL_COMMITTED, state_version=0,
                       details={"boundary": {}, "complete": True, "records_read": 0, "mode": "streaming-only"})


def _worker(mode: str, warehouse: str, bootstrap: str, topic: str, max_offsets: int) -> dict:
    from deploy.spark import build_spark
    from jobs.stream import StreamSettings, run_stream
    from state_handoff.handoff import run_handoff
    from state_handoff.pipelines import get_pipeline
    from state_handoff.tables import Tables

    pipeline = get_pipeline("demo")
    tables = Tables(warehouse, pipeline.name)
    stages: dict[str, float] = {}
    started = time.monotonic()
    mark = started

    def stage(name):
        nonlocal mark
        now = time.monotonic()
        stages[name] = round(now - mark, 3)
        mark = now

    spark = build_spark(f"switchyard-bench-{mode}")
    stage("spark_start")
    settings = StreamSettings(until_caught_up=True, max_offsets_per_trigger=max_offsets)
    quiet = lambda *_: None  # noqa: E731
    if mode == "streaming_only":
        # streaming only: never switching back to the batch path, which is what B is
        settings.switch_back_lag = None
        _empty_start(spark, pipeline, tables, topic)
        run_handoff(spark, pipeline, tables, bootstrap)
        stage("empty_start")
        run_stream(spark, pipeline, tables, bootstrap, settings, out=quiet)
        stage("stream")
    elif mode == "switchyard":
        from jobs.backfill import backfill_tiles, commit_state

        tiles_run = backfill_tiles(spark, pipeline, tables, out=quiet)
        stage("backfill_tiles")
        commit_state(spark, pipeline, tables, tiles_run, out=quiet, kafka_tail_from=bootstrap)
        stage("commit_state")
        handoff = run_handoff(spark, pipeline, tables, bootstrap)
        stage("handoff")
        run_stream(spark, pipeline, tables, bootstrap, settings, out=quiet)
        stage("stream")
        _stream_laps(tables, handoff.handoff_id, stages)
    elif mode == "backfill_hash":
        from jobs.backfill import backfill_tiles

        backfill_tiles(spark, pipeline, tables, strategy="hash", out=quiet)
        stage("backfill_tiles")
    elif mode == "batch_only":
        _batch_only(spark, pipeline, tables, bootstrap, topic)
        stage("aggregate")
    elif mode == "batch_full":
        _batch_only(spark, pipeline, tables, bootstrap, topic, every_table=True)
        stage("aggregate")
    else:
        raise ValueError(mode)
    return {"seconds": round(time.monotonic() - started, 3), "stages": stages}


def _stream_laps(tables, handoff_id: str, stages: dict) -> None:
    """The tiles run's, the commit's and the stream stage's parts, from the BACKFILL_COMMITTED, SWITCHED and
    CAUGHT_UP entries: `tiles.<lap>`, `commit.<lap>` and `stream.<lap>` seconds."""
    from state_handoff import handoff_log

    committed = handoff_log.latest(None, tables, handoff_log.BACKFILL_COMMITTED, handoff_id)
    if committed is not None:
        details = handoff_log.details(committed)
        stages.update({f"tiles.{k}": v for k, v in details.get("tiles_s", {}).items()})
        stages.update({f"commit.{k}": v for k, v in details.get("commit_s", {}).items()})
    switched = handoff_log.latest(None, tables, handoff_log.SWITCHED, handoff_id)
    caught_up = handoff_log.latest(None, tables, handoff_log.CAUGHT_UP, handoff_id)
    if switched is None:
        return
    details = handoff_log.details(switched)
    stages.update({f"stream.{k}": v for k, v in details.get("startup_s", {}).items()})
    if caught_up is not None:
        stages["stream.switched_to_caught_up"] = round((caught_up.at - switched.at).total_seconds(), 3)


def _batch_only(spark, pipeline, tables, bootstrap: str, topic: str, every_table: bool = False) -> None:
    """The lower bound: archive files plus the un-archived tail read from Kafka in batch, one hash aggregation.

    every_table: the same outputs as A and B (state, final and open windows, dead letters) from one parse, so
    B/C compares equal work; a batch job sees every record, so no record is late here.
    """
    from pyspark.sql import functions as F

    from jobs.aggregation import backlog_watermark, tile_start
    from jobs.stream_events import batch_window_partials
    from state_handoff.aggregates import event_aggregations, flatten_last
    from state_handoff.archive_files import archive_meta
    from state_handoff.parsing import cached_for_two_passes, parse_events

    cut = archive_meta(tables.archive)["cut"]
    archived = spark.read.parquet(tables.archive).select("kafka_partition", "kafka_offset", "value")
    tail = (spark.read.format("kafka").options(**spark_source_options(bootstrap)).option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: {p: o for p, o in cut.items()}}))
            .option("endingOffsets", "latest").load()
            .select(F.col("partition").alias("kafka_partition"), F.col("offset").alias("kafka_offset"), "value"))
    parsed = parse_events(pipeline, archived.unionByName(tail))
    if every_table:
        parsed = cached_for_two_passes(pipeline, parsed)
    events = parsed.where("error IS NULL")
    state = (events.groupBy(pipeline.key).agg(*event_aggregations(pipeline, pipeline.aggregations, keyed=True))
             .select(pipeline.key, *flatten_last(pipeline.aggregations, keyed=True)))
    state.write.format("delta").mode("overwrite").save(tables.state)
    if not every_table:
        return
    parsed.where("error IS NOT NULL").select("kafka_partition", "kafka_offset", "value", F.col("error").alias("reason")) \
        .write.format("delta").mode("overwrite").save(tables.dead_letter)
    if pipeline.windows is not None:
        watermark = backlog_watermark(pipeline, events.agg(F.max(pipeline.event_time)).first()[0])
        windows = batch_window_partials(pipeline, events.withColumn("window_start", tile_start(pipeline)))
        closed = F.col("window_end") <= F.lit(watermark)
        for part, path in ((closed, tables.windows), (~closed, tables.window_state)):
            windows.where(part).write.format("delta").mode("overwrite").save(path)
    parsed.unpersist()


# ---------------------------------------------------------------- the parent

def _tree_rss_mb(pid: int) -> tuple[float, float]:
    """(JVM RSS, Python RSS) in MB for a worker and its children."""
    jvm = python = 0.0
    pids = [pid]
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                pids.append(int(stat.parent.name))
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue
    for p in pids:
        try:
            status = Path(f"/proc/{p}/status").read_text()
            cmd = Path(f"/proc/{p}/cmdline").read_bytes()
        except FileNotFoundError:
            continue
        rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0) / 1024
        if b"java" in cmd.split(b"\0")[0]:
            jvm += rss
        else:
            python += rss
    return jvm, python


def _run_worker(mode: str, warehouse: str, bootstrap: str, topic: str, max_offsets: int, log: Path) -> Run:
    cmd = [sys.executable, "-m", "jobs.bench", mode, warehouse, bootstrap, topic, str(max_offsets)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=open(log, "a"), cwd=ROOT, text=True)
    peaks = [0.0, 0.0]

    def sample():
        while proc.poll() is None:
            jvm, python = _tree_rss_mb(proc.pid)
            peaks[0], peaks[1] = max(peaks[0], jvm), max(peaks[1], python)
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out, _ = proc.communicate()
    sampler.join()
    if proc.returncode != 0:
        raise RuntimeError(f"bench worker {mode} failed ({proc.returncode}); see {log}")
    figures = json.loads(out.strip().splitlines()[-1])
    return Run(mode, figures["seconds"], 0, round(peaks[0]), round(peaks[1]), figures["stages"])


def _state_checksum(spark, warehouse: str) -> tuple:
    from pyspark.sql import functions as F

    state = spark.read.format("delta").load(f"{warehouse}/demo/state")
    row = state.agg(F.count("*"), F.sum("event_count"), F.sum(F.hash("key", "event_count", "amount_min", "amount_max",
                                                                         "last_event_time", "last_amount").cast("long")),
                    F.sum("amount_sum")).first()
    return tuple(row)


def states_identical(warehouses: list[str]) -> tuple[bool, list]:
    from deploy.spark import build_spark

    spark = build_spark("switchyard-bench-compare")
    sums = [_state_checksum(spark, w) for w in warehouses]
    first = sums[0]
    same = all(s[:3] == first[:3] and abs(s[3] - first[3]) <= 1e-6 * max(1.0, abs(first[3])) for s in sums)
    spark.stop()
    return same, sums


def run_bench(bootstrap: str, events: int, keys: int, partitions: int, fraction: float, json_file: str,
              out_dir: str = "bench-out", seed: int = 42, days: int = 7, max_offsets: int = 1_000_000,
              latency_seconds: float = 20.0, arms: tuple[str, ...] = ARMS, out=print) -> dict:
    from deploy.spark import build_spark, spark_master
    from jobs.archive import archive_cut, run_archive
    from jobs.generate import run_generate
    from state_handoff.kafka_io import offset_bounds, partitions_of
    from state_handoff.pipelines import get_pipeline
    from state_handoff.tables import Tables

    unknown = [a for a in arms if a not in ARMS]
    if unknown or not arms:
        raise UserError(f"--arms {','.join(arms)}: name some of {', '.join(ARMS)}")
    if events < 1000 or not 0 < fraction < 1:
        raise UserError("--events must be at least 1000 and --archived-fraction strictly between 0 and 1")
    base = Path(out_dir).resolve() / f"n{events}-k{keys}-p{partitions}-s{seed}"
    topic = f"bench.n{events}.k{keys}.p{partitions}.s{seed}"
    log = base / "workers.log"
    base.mkdir(parents=True, exist_ok=True)
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

    pipeline = get_pipeline("demo")
    fresh = {}
    for mode in ("streaming_only", "switchyard", "batch_only", "batch_full", "backfill_hash"):
        shutil.rmtree(base / mode, ignore_errors=True)
        fresh[mode] = str(base / mode)
    out("archiving (timed separately: it stands in for a sink that already exists)")
    spark = build_spark("switchyard-bench-archive")
    started = time.monotonic()
    cut = archive_cut(bootstrap, topic, fraction=fraction)
    run_archive(spark, pipeline, Tables(fresh["switchyard"], "demo"), bootstrap, topic, cut, out=lambda *_: None)
    archive_s = time.monotonic() - started
    spark.stop()
    for mode in ("batch_only", "batch_full", "backfill_hash"):
        shutil.copytree(Tables(fresh["switchyard"], "demo").archive, Tables(fresh[mode], "demo").archive)

    runs = {}
    for label, mode in RUNS.items():
        if label not in arms:
            continue
        out(f"running {label} ({mode})")
        runs[mode] = _run_worker(mode, fresh[mode], bootstrap, topic, max_offsets, log)
        runs[mode].records = events
        out(f"  {mode}: {runs[mode].seconds:.1f}s {runs[mode].stages}")
    compared = [m for m in ("streaming_only", "switchyard", "batch_only", "batch_full") if m in runs]
    identical, sums = states_identical([fresh[m] for m in compared]) if len(compared) > 1 else (None, [])
    if set(arms) != set(ARMS):
        result = {"events": events, "keys": keys, "partitions": partitions, "archived_fraction": fraction,
                  "machine": f"{os.cpu_count()} cores, {_mem_gb():.0f} GB", "spark_master": spark_master(),
                  "arms": list(arms), "archive_s": round(archive_s, 3), **generated,
                  **{f"{m}_s": r.seconds for m, r in runs.items()}, **_ratios(runs), "states_identical": identical,
                  "state_checksums": [list(map(str, s)) for s in sums],
                  "runs": {m: {**asdict(r), "records_per_s": round(r.records_per_s)} for m, r in runs.items()}}
        result["goals"] = goals(result)
        Path(json_file).write_text(json.dumps(result, indent=2))
        for mode, r in runs.items():
            out(f"{mode:<16} {r.seconds:>8.1f}s {r.records_per_s:>11,.0f} records/s  JVM {r.peak_jvm_mb} MB  "
                f"on {spark_master()}")
        out(_goals_table(result["goals"]))
        if identical is False:
            raise RuntimeError(f"the runs ended in different keyed state: {sums}")
        return result

    latency = None
    if latency_seconds > 0:
        from jobs.latency import run_latency_bench

        out("measuring steady-state stream latency at 1000 events/s")
        shutil.rmtree(base / "latency", ignore_errors=True)  # the archive grows per topic; each run has its own
        report = run_latency_bench(str(base / "latency"), bootstrap, [1000], latency_seconds, out=lambda *_: None)
        latency = asdict(report)
    a, b, c = runs["streaming_only"], runs["switchyard"], runs["batch_only"]
    result = {
        "events": events, "keys": keys, "partitions": partitions, "archived_fraction": fraction,
        "machine": f"{os.cpu_count()} cores, {_mem_gb():.0f} GB", "spark_master": spark_master(),
        "archive_s": round(archive_s, 3), **generated,
        "streaming_only_s": a.seconds, "switchyard_s": b.seconds, "batch_only_s": c.seconds,
        "batch_full_s": runs["batch_full"].seconds, **_ratios(runs),
        "states_identical": identical, "state_checksums": [list(map(str, s)) for s in sums],
        "runs": {m: {**asdict(r), "records_per_s": round(r.records_per_s)} for m, r in runs.items()},
        "backfill_sort_s": b.stages.get("backfill_tiles"),
        "backfill_hash_s": runs["backfill_hash"].stages.get("backfill_tiles"),
        "latency": latency,
    }
    result["goals"] = goals(result)
    Path(json_file).write_text(json.dumps(result, indent=2))
    _chart(result, Path(json_file).with_suffix(".png"))
    out(_table(result))
    if not identical:
        raise RuntimeError(f"A, B and C ended in different keyed state: {sums}")
    return result


def _ratios(runs: dict) -> dict:
    """The goals' ratios among the arms that ran (all of them, or some, e.g. B,C,C-full at 3*10^7), and B's stream
    stage."""
    pairs = {"ratio_streaming_over_switchyard": ("streaming_only", "switchyard"),
             "ratio_switchyard_over_batch": ("switchyard", "batch_only"),
             "ratio_switchyard_over_batch_full": ("switchyard", "batch_full")}
    ratios = {name: round(runs[a].seconds / runs[b].seconds, 3) for name, (a, b) in pairs.items()
              if a in runs and b in runs}
    if "switchyard" in runs:
        ratios["switchyard_stream_stage_s"] = runs["switchyard"].stages.get("stream")
    return ratios


#: Issue 13's goals for one bench run: (name, what it measures, comparison, target).
GOALS = (
    ("streaming_over_switchyard", "A streaming-only / B switchyard", ">=", 4.0),
    ("switchyard_over_batch_full", "B switchyard / C writing every table", "<=", 1.10),
    ("switchyard_stream_stage_s", "B's stream stage, s", "<=", 8.0),
    ("latency_p50_s", "update latency p50 at 1,000 events/s, s", "<=", 1.0),
    ("latency_p99_s", "update latency p99 at 1,000 events/s, s", "<=", 2.0),
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


def _goals_table(verdicts: dict) -> str:
    lines = ["goals:"]
    for goal in verdicts.values():
        figure = goal["figure"]
        figure = ("not measured" if figure is None else f"{figure:,.0f}" if figure >= 1000 else f"{figure:.2f}")
        verdict = "" if goal["met"] is None else ("met" if goal["met"] else "MISSED")
        lines.append(f"  {goal['measures']:<55} {figure:>12} (goal {goal['target']}) {verdict}")
    return "\n".join(lines)


def _mem_gb() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30


def _table(result: dict) -> str:
    lines = [f"switchyard bench: {result['events']:,} events, {result['keys']:,} keys, {result['partitions']} partitions, "
             f"{result['archived_fraction']:.0%} archived ({result['machine']}); archive {result['archive_s']:.1f}s",
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
    lines.append(_goals_table(result["goals"]))
    return "\n".join(lines)


def _chart(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["A streaming-only", "B switchyard", "C batch-only", "C, every table"]
    values = [result["streaming_only_s"], result["switchyard_s"], result["batch_only_s"], result["batch_full_s"]]
    fig, ax = plt.subplots(figsize=(7, 3.5))
    bars = ax.barh(labels, values, color=["#b0b0b0", "#2a7ab9", "#6fbf73", "#a9d8ab"])
    ax.bar_label(bars, labels=[f"{v:.0f} s" for v in values], padding=4)
    ax.set_xlim(0, max(values) * 1.2)
    ax.invert_yaxis()
    ax.set_xlabel("wall time to an up-to-date keyed state (s)")
    ax.set_title(f"{result['events']:,} events: A/B = {result['ratio_streaming_over_switchyard']:.2f}, "
                 f"B/C = {result['ratio_switchyard_over_batch']:.2f}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


SCALING_ARMS = (("streaming_only", "A streaming-only", "#b0b0b0"), ("switchyard", "B switchyard", "#2a7ab9"),
                ("batch_only", "C batch-only", "#6fbf73"), ("batch_full", "C, every table", "#a9d8ab"))


def scaling(results: list[dict]) -> dict:
    """Wall time per arm and B's JVM peak at each size, from bench JSON results (full or `--arms` runs)."""
    sizes: dict[int, dict] = {}
    for result in results:
        row = sizes.setdefault(result["events"], {"events": result["events"]})
        for mode, _label, _color in SCALING_ARMS:
            run = result["runs"].get(mode)
            if run:
                row[f"{mode}_s"] = run["seconds"]
                row[f"{mode}_jvm_mb"] = run["peak_jvm_mb"]
    return {"sizes": [sizes[n] for n in sorted(sizes)]}


def run_scaling(json_files: list[str], chart: str, out=print) -> dict:
    """`switchyard bench-scaling`: how each arm's wall time grows with the events written (log-log), and B's
    JVM peak beside it (flat when the sort spills rather than grows)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = []
    for name in json_files:
        try:
            results.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as err:
            raise UserError(f"{name}: not a bench result ({err}); give files `switchyard bench --json` wrote") from None
    table = scaling(results)
    rows = table["sizes"]
    fig, (times, memory) = plt.subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    for mode, label, color in SCALING_ARMS:
        points = [(r["events"], r[f"{mode}_s"]) for r in rows if f"{mode}_s" in r]
        if points:
            times.plot(*zip(*points), marker="o", label=label, color=color)
    times.set_xscale("log")
    times.set_yscale("log")
    times.set_xlabel("events written")
    times.set_ylabel("wall time to an up-to-date state (s)")
    times.legend()
    times.grid(True, which="both", alpha=0.3)
    peaks = [(r["events"], r["switchyard_jvm_mb"]) for r in rows if "switchyard_jvm_mb" in r]
    if peaks:
        memory.plot(*zip(*peaks), marker="o", color="#2a7ab9")
        memory.set_xscale("log")
        memory.set_ylim(0, max(p for _, p in peaks) * 1.3)
    memory.set_xlabel("events written")
    memory.set_ylabel("B's JVM peak RSS (MB)")
    memory.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"switchyard bench, {os.cpu_count()} cores: cost against size")
    fig.tight_layout()
    fig.savefig(chart, dpi=120)
    plt.close(fig)
    header = f"{'events':>12} " + " ".join(f"{label:>16}" for _, label, _ in SCALING_ARMS) + f" {'B JVM MB':>9}"
    out(header)
    for r in rows:
        out(f"{r['events']:>12,} " + " ".join(f"{r[f'{m}_s']:>15.1f}s" if f"{m}_s" in r else f"{'-':>16}"
                                              for m, _, _ in SCALING_ARMS)
            + f" {r.get('switchyard_jvm_mb', '-'):>9}")
    Path(chart).with_suffix(".json").write_text(json.dumps(table, indent=2))
    return table


if __name__ == "__main__":
    mode, warehouse, bootstrap, topic, max_offsets = sys.argv[1:6]
    print(json.dumps(_worker(mode, warehouse, bootstrap, topic, int(max_offsets))), flush=True)
