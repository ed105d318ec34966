"""The nightly scheduled backfill: one new day added to an archive of many, against a backfill of every day.

On a synthetic archive (benchmarks/synthetic_archive.py: --events over --days), in one fresh process and JVM:
1. the archive before the night: every day but the last backfilled into a warehouse (untimed; it warms the JVM);
2. a full backfill of every day into a second warehouse: what the new day is held against;
3. the night: the last day backfilled into the first warehouse, its tiles merged into the earlier merge;
4. the same day backfilled again over itself: its old tiles are in the earlier merge, so every tile is merged
   (what every nightly commit cost before the merge was incremental).
The two warehouses' states are compared key by key. The goal: the new day costs at most a tenth of the full
backfill. Run it at two archive lengths with the same events per day to see the day's cost follow the day, not the
archive. `--live`: the same night under a live stream, a rebase at a cut (benchmarks/nightly_live.py).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.harness import ROOT
from benchmarks.nightly_figures import PIPELINE, SUM_TOLERANCE, figures_of, report, steps, timed
from benchmarks.synthetic_archive import archive_is_current, archive_params, build_archive
from switchyard.state_handoff import settings


def _same_state(spark, left: str, right: str) -> dict:
    from pyspark.sql import functions as F

    a = spark.read.format("delta").load(left).drop("update_version")
    b = spark.read.format("delta").load(right).drop("update_version")
    joined = a.alias("a").join(b.alias("b"), "key", "full_outer")
    differ = F.lit(False)
    for column in (c for c in a.columns if c != "key"):
        x, y = F.col(f"a.{column}"), F.col(f"b.{column}")
        if column == "amount_sum":
            differ = differ | (F.abs(x - y) > F.lit(SUM_TOLERANCE) * F.greatest(F.abs(x), F.abs(y), F.lit(1.0)))
        else:
            differ = differ | ~x.eqNullSafe(y)
    return {"keys": a.count(), "keys_different": joined.where(differ).count()}


def worker(argv: list[str]) -> dict:
    """Inside the fresh process: the four steps of the module docstring, timed."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.backfill import run_backfill
    from switchyard.state_handoff.io.archive_files import list_archive
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    out_dir, archive = Path(argv[0]), Path(argv[1])
    pipeline = get_pipeline(PIPELINE)
    warehouses = {}
    for name in ("nightly", "full"):
        tables = Tables(str(out_dir / name), PIPELINE)
        shutil.rmtree(tables.root, ignore_errors=True)
        Path(tables.root).mkdir(parents=True)
        os.symlink(archive, tables.archive)
        warehouses[name] = tables
    days = sorted({f.day for f in list_archive(warehouses["full"].archive)})
    spark = build_spark("bench-nightly")
    marks: list[str] = []
    print(f"== {len(days)} archived days, {days[0]}..{days[-1]}", flush=True)
    _, before_s = timed(f"the archive before the night ({days[0]}..{days[-2]})", lambda out: run_backfill(
        spark, pipeline, warehouses["nightly"], str(days[0]), str(days[-2]), out=out), marks)
    full, full_s = timed("a full backfill of every day", lambda out: run_backfill(
        spark, pipeline, warehouses["full"], out=out), marks)
    night, night_s = timed(f"the night: {days[-1]} added", lambda out: run_backfill(
        spark, pipeline, warehouses["nightly"], str(days[-1]), str(days[-1]), out=out), marks)
    compared = _same_state(spark, warehouses["nightly"].state, warehouses["full"].state)
    _, again_s = timed(f"{days[-1]} backfilled again over itself", lambda out: run_backfill(
        spark, pipeline, warehouses["nightly"], str(days[-1]), str(days[-1]), out=out), marks)
    spark.stop()
    print("\n".join(marks), flush=True)
    return {"days": len(days), "records": full.records_read, "records_of_the_day": night.records_read,
            "keys": full.keys, "before_the_night_s": before_s, "full_backfill_s": full_s, "new_day_s": night_s,
            "day_again_s": again_s, "new_day_share": round(night_s / full_s, 3),
            "day_again_share": round(again_s / full_s, 3), "states": compared,
            "steps_of_the_nightly_warehouse": steps(warehouses["nightly"])}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks nightly", description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--keys", type=int, default=100_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--partitions", type=int, default=4, help="Kafka partitions of the synthetic archive")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--malformed-rate", type=float, default=0.01)
    parser.add_argument("--out-dir", help="benchmark warehouses (default ./bench-out/nightly/<events>-<days>, "
                                          "with --live ./bench-out/nightly-live/<events>-<days>)")
    parser.add_argument("--json", help="write every figure here")
    parser.add_argument("--live", action="store_true",
                        help="the night under a live stream, a rebase at a cut, on a topic of the local broker "
                             "(benchmarks/nightly_live.py)")
    parser.add_argument("--bootstrap", default=settings.value("SWITCHYARD_BOOTSTRAP"),
                        help="with --live: the Kafka broker (env SWITCHYARD_BOOTSTRAP)")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="with --live: the limit of each wait on the stream")
    args = parser.parse_args(argv)
    if args.events < 1 or args.days < 2 or args.keys < args.partitions:
        parser.error("--events must be at least 1, --days at least 2 and --keys at least --partitions")
    if args.live:
        from benchmarks.nightly_live import run_live

        return run_live(args, argv)
    out_dir = Path(args.out_dir or ROOT / "bench-out" / "nightly" / f"{args.events}-{args.days}").resolve()
    archive = out_dir / "archive"
    params = archive_params(args)
    figures = figures_of(params, argv)
    if not archive_is_current(archive, params):
        print(f"== building the archive: {args.events:,} events, {args.keys:,} keys, {args.days} days", flush=True)
        out_dir.mkdir(parents=True, exist_ok=True)
        figures["archive"] = build_archive(archive, params)
    print(f"== archive at {archive}", flush=True)
    run = subprocess.run([sys.executable, "-m", "benchmarks", "worker", "nightly", str(out_dir), str(archive)],
                         stdout=subprocess.PIPE, text=True, cwd=ROOT)
    lines = run.stdout.strip().splitlines()
    print("\n".join(lines[:-1]), flush=True)
    if run.returncode or not lines:
        print("the nightly run failed", file=sys.stderr)
        return 1
    return report(figures, json.loads(lines[-1]), args.json)
