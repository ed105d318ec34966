"""The driver's memory while Spark scans Parquet, with Parquet's vectored reads on and off. Usage:

    .venv/bin/python -m benchmarks scan-memory [--rows 30000000] [--scans 3] [--dir D] [--json F]

Writes (once per --rows) a Parquet dataset of three hashed text columns with a number between each, so a scan of the
three texts reads three column chunks of 32-55 MB per row group that do not touch. Then, for each arm in a fresh
process with the default session (2 GB heap): the three texts scanned `--scans` times, the JVM's anonymous memory
sampled ten times a second; at its peak, the heap the JVM had committed and its direct buffers (Java's `direct`
buffer pool).
Parquet 1.16 reads a row group's chunks as vectored reads; on a local file system each goes through a JDK pool
thread (AsynchronousFileChannel), which copies it through a direct buffer of the chunk's size and keeps that buffer
for the thread's life. The arms end by agreeing on what they read, or the benchmark fails.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

from benchmarks.harness import MB, machine, run_fresh, worker_command, write_json

ARMS = {"vectored reads on (Parquet's default)": "true", "vectored reads off (switchyard's default)": "false"}
TEXTS = ("t1", "t2", "t3")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scan-memory", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=30_000_000)
    parser.add_argument("--scans", type=int, default=3)
    parser.add_argument("--dir", default="bench-out/scan-memory", help="where the dataset is written (kept)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.rows <= 0 or args.scans <= 0:
        parser.error("--rows and --scans take a positive number")

    data = Path(args.dir).resolve() / f"rows-{args.rows}"
    log = Path(args.dir).resolve() / "workers.log"
    data.parent.mkdir(parents=True, exist_ok=True)
    if not (data / "_SUCCESS").exists():
        print(f"writing {args.rows:,} rows to {data}", flush=True)
        made = run_fresh(worker_command("scan_memory", "write", data, args.rows), log)
        if made.returncode:
            raise SystemExit(f"benchmarks scan-memory: writing the dataset failed (see {log})")
    arms = {}
    for name, vectored in ARMS.items():
        run = run_fresh(worker_command("scan_memory", "scan", data, args.scans, vectored), log)
        if run.returncode:
            raise SystemExit(f"benchmarks scan-memory: the arm {name!r} failed (see {log})")
        arms[name] = run.figures()
        f = arms[name]
        print(f"{name:<44} scans {', '.join(f'{s:.1f}' for s in f['scan_s'])} s; peak anonymous memory "
              f"{f['peak_anon_mb']:,} MB (the heap committed then {f['heap_at_peak_mb']:,}, direct buffers "
              f"{f['direct_at_peak_mb']:,}); direct buffers at most {f['peak_direct_mb']:,} MB", flush=True)
    sums = {f["text_lengths"] for f in arms.values()}
    if len(sums) != 1:
        raise SystemExit(f"benchmarks scan-memory: the arms read different data: {sums}")
    on, off = arms.values()
    # The peaks are the kernel's counts and the direct buffers the JVM's. The heap committed is not all resident,
    # and G1 stops counting what it gives back before the kernel does, so peak minus heap says little.
    result = {"machine": machine(), "rows": args.rows, "scans": args.scans, "arms": arms,
              "peak_anon_on_minus_off_mb": on["peak_anon_mb"] - off["peak_anon_mb"],
              "peak_anon_on_over_off": round(on["peak_anon_mb"] / off["peak_anon_mb"], 2)}
    print(f"peak anonymous memory, vectored reads on against off: {result['peak_anon_on_over_off']}x, "
          f"{result['peak_anon_on_minus_off_mb']:+,} MB")
    if args.json:
        write_json(args.json, result)
    return 0


def worker(argv: list[str]) -> dict:
    from switchyard.deploy.spark import build_spark

    if argv[0] == "write":
        from pyspark.sql import functions as F

        spark = build_spark("benchmarks-scan-memory-write")
        ids = spark.range(0, int(argv[2]), numPartitions=8)
        text = F.col("id").cast("string")
        ids.select(F.sha2(text, 256).alias("t1"), "id", F.sha2(text, 224).alias("t2"), (F.col("id") % 7).alias("k"),
                   F.sha2(text, 384).alias("t3")).write.mode("overwrite").parquet(argv[1])
        return {"written": argv[1]}

    data, scans, vectored = argv[1], int(argv[2]), argv[3]
    spark = build_spark("benchmarks-scan-memory",
                        extra_conf={"spark.hadoop.parquet.hadoop.vectored.io.enabled": vectored})
    jvm = spark.sparkContext._jvm
    pid = int(jvm.java.lang.ProcessHandle.current().pid())
    factory = jvm.java.lang.management.ManagementFactory
    direct = next(p for p in factory.getPlatformMXBeans(jvm.java.lang.Class.forName(
        "java.lang.management.BufferPoolMXBean")) if p.getName() == "direct")
    heap = factory.getMemoryMXBean()
    peak = {"anon": 0, "heap": 0, "direct": 0, "direct_at_peak": 0}
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            with open(f"/proc/{pid}/status") as status:
                anon = next(int(line.split()[1]) for line in status if line.startswith("RssAnon")) * 1024
            committed, buffers = heap.getHeapMemoryUsage().getCommitted(), direct.getMemoryUsed()
            if anon > peak["anon"]:  # the split at the peak (G1 gives heap back a while after it stops counting it)
                peak.update(anon=anon, heap=committed, direct_at_peak=buffers)
            peak["direct"] = max(peak["direct"], buffers)
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    seconds, lengths = [], None
    for _ in range(scans):
        started = time.monotonic()
        lengths = spark.read.parquet(data).selectExpr(*(f"sum(length({c}))" for c in TEXTS)).collect()[0]
        seconds.append(round(time.monotonic() - started, 1))
    done.set()
    sampler.join()
    return {"vectored": vectored, "spark_version": spark.version, "scan_s": seconds, "text_lengths": sum(lengths),
            "peak_anon_mb": peak["anon"] // MB, "heap_at_peak_mb": peak["heap"] // MB,
            "direct_at_peak_mb": peak["direct_at_peak"] // MB, "peak_direct_mb": peak["direct"] // MB,
            "direct_after_mb": direct.getMemoryUsed() // MB}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
