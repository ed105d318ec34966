"""A stream's start: from `switchyard stream`'s process start to SWITCHED, in fresh processes on one warehouse.

One small switched pipeline is made once (4,000 archived events on 200 keys, backfill, handoff, then 200 events
past the handoff on the topic); each trial copies its warehouse and runs `switchyard stream --until-caught-up` on
the copy, so every trial seeds a new stream from the same handoff. Each trial reports the SWITCHED entry's
figures: seconds from the process's start and from the supervisor's start (in process), where the latter went
(`startup_s`), and the keyed query's first batch as Spark timed it. `--jvm-options` (extra driver JVM options,
SWITCHYARD_JVM_OPTIONS) and `--conf` (the stream's own `--conf spark.KEY=VALUE`) make a B arm: trials alternate
A and B, for an A/B on a noisy machine. Needs the broker (`switchyard dev kafka start`). Usage:

    .venv/bin/python -m benchmarks stream-start --trials 3 [--jvm-options "-XX:TieredStopAtLevel=1"] \
        [--conf spark.KEY=VALUE ...] [--json F]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from benchmarks.harness import ROOT, switchyard_command, write_json
from benchmarks.latency import latency_event, small_switched_pipeline
from switchyard.state_handoff import settings
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream.layout import StreamPaths, read_json
from switchyard.state_handoff.tables import Tables

PIPELINE = get_pipeline("demo")


def switched_pipeline(base: Path, bootstrap: str) -> None:
    """The latency scenario's small switched pipeline in `base`, then 200 events past the handoff on its topic."""
    from switchyard.state_handoff.io.kafka_io import produce

    topic = f"start.{int(time.time())}"
    small_switched_pipeline(Tables(str(base), PIPELINE.name), bootstrap, topic, out=lambda *_: None)
    first = datetime.now(timezone.utc) - timedelta(minutes=30)
    tail = [(f"seed-{i % 200}".encode(),
             latency_event(f"seed-{i % 200}", f"tail-{i}", first + timedelta(seconds=i), 1.0), i % 2, None)
            for i in range(200)]
    produce(bootstrap, topic, tail)


def trial(base: Path, work: Path, bootstrap: str, jvm_options: str = "", conf: tuple[str, ...] = ()) -> dict:
    warehouse = work / "trial"
    shutil.rmtree(warehouse, ignore_errors=True)
    shutil.copytree(base, warehouse)
    env = dict(os.environ)
    if jvm_options:
        env["SWITCHYARD_JVM_OPTIONS"] = " ".join(filter(None, [settings.value("SWITCHYARD_JVM_OPTIONS"), jvm_options]))
    stream = switchyard_command("stream", "--pipeline", PIPELINE.name, "--warehouse", warehouse,
                                "--bootstrap", bootstrap, "--until-caught-up", "--caught-up-lag", "0",
                                "--trigger-seconds", "0", *(a for c in conf for a in ("--conf", c)))
    done = subprocess.run(stream, capture_output=True, text=True, cwd=ROOT, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"the stream exited with {done.returncode}: {done.stderr.strip()[-2000:]}")
    tables = Tables(str(warehouse), PIPELINE.name)
    switched = handoff_log.latest(tables, Status.SWITCHED)
    figures = details.of(switched)
    progress = read_json(StreamPaths.of(tables, switched.handoff_id).recent_progress)
    first = progress[f"{PIPELINE.name}-keyed"][0]
    shutil.rmtree(warehouse, ignore_errors=True)
    return {"jvm_options": jvm_options, "conf": list(conf),
            "since_process_start_s": figures.seconds_since_process_start, "in_process_s": figures.seconds_since_start,
            "startup_s": figures.startup_s, "first_keyed_batch_ms": first["duration_ms"]}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks stream-start", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3, help="trials per arm")
    parser.add_argument("--jvm-options", help="B arm: these driver JVM options added (trials alternate A, B)")
    parser.add_argument("--conf", action="append", default=[], metavar="spark.KEY=VALUE",
                        help="B arm: the stream run with this Spark setting (repeatable)")
    parser.add_argument("--bootstrap", default=settings.value("SWITCHYARD_BOOTSTRAP"))
    parser.add_argument("--json", help="write the trials here")
    args = parser.parse_args(argv)
    arms = [("", ())]
    if args.jvm_options or args.conf:
        arms.append((args.jvm_options or "", tuple(args.conf)))
    work = Path(tempfile.mkdtemp(prefix="switchyard-start-"))
    try:
        base = work / "base"
        switched_pipeline(base, args.bootstrap)
        trials = []
        for i in range(args.trials):
            for arm, (options, conf) in zip("AB", arms):
                t = trial(base, work, args.bootstrap, options, conf)
                trials.append({"arm": arm, **t})
                print(f"trial {i + 1} {arm}: SWITCHED {t['since_process_start_s']:.2f} s from the "
                      f"process's start, {t['in_process_s']:.2f} s in process {t['startup_s']}", flush=True)
        for arm, (options, conf) in zip("AB", arms):
            mine = [t for t in trials if t["arm"] == arm]
            since_start = statistics.median(t["since_process_start_s"] for t in mine)
            in_process = statistics.median(t["in_process_s"] for t in mine)
            named = " ".join(filter(None, [options, *conf]))
            print(f"{f'{arm} ({named})' if named else arm}: median SWITCHED {since_start:.2f} s from the process's "
                  f"start, {in_process:.2f} s in process")
        if args.json:
            write_json(args.json, {"trials": trials})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0
