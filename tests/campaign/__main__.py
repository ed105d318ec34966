"""The campaign's command line.

    python -m tests.campaign --seed 7                 replay one history (its first K steps with --steps K)
    python -m tests.campaign --histories 100          a long campaign: seeds 1..100, each failure shrunk to the
                                                      shortest prefix that still fails; a summary in --out
                                                      (--minutes M: start no new history after M minutes)

Each history runs in a process of its own (its own Spark session) against one local broker this command starts on
127.0.0.1 and stops at the end."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUDGET_S = 1500  # a history still running after this long is wedged


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tests.campaign", description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--seed", type=int, help="run the history of this seed")
    which.add_argument("--histories", type=int, help="run this many histories, seeds from --first-seed on")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--minutes", type=float, help="with --histories: start no new history after this long")
    parser.add_argument("--steps", type=int, help="with --seed: only the history's first STEPS steps")
    parser.add_argument("--out", type=Path, help="where the verdicts and the summary go (default: a temporary folder)")
    parser.add_argument("--classic", action="store_true", help="the first campaign's histories (no served streams, "
                        "redeploys or Dagster jobs): the short mode's earlier seeds")
    parser.add_argument("--broker-port", type=int, help=argparse.SUPPRESS)  # a long campaign's broker, for a child
    parser.add_argument("--broker-home", type=Path, help=argparse.SUPPRESS)
    return parser


def _started_broker(home: Path):
    from switchyard.deploy import kafka_broker
    from tests.support.ports import free_port_pair

    broker = kafka_broker.Broker.at(free_port_pair(), home)
    kafka_broker.start(broker)
    return broker


def _one(args) -> int:
    """One history in this process; its verdict printed, and written to --out/<seed>.json."""
    from switchyard.deploy import kafka_broker
    from switchyard.deploy.spark import build_spark
    from tests.campaign.run import run_history

    out = args.out or Path(tempfile.mkdtemp(prefix="switchyard-campaign-"))
    out.mkdir(parents=True, exist_ok=True)
    own = args.broker_port is None
    broker = (_started_broker(out / "kafka") if own else kafka_broker.Broker.at(args.broker_port, args.broker_home))
    os.environ["SWITCHYARD_BOOTSTRAP"] = broker.bootstrap
    spark = build_spark("switchyard-campaign", profile="test")
    work = out / (f"history-{args.seed}" + (f"-{args.steps}" if args.steps else ""))
    try:
        verdict = run_history(spark, broker, Path(work), args.seed, args.steps, surfaces=not args.classic)
    finally:
        spark.stop()
        if own:
            kafka_broker.stop(broker)
    name = f"{args.seed}" + (f"-{args.steps}" if args.steps else "")
    (out / f"{name}.json").write_text(json.dumps(verdict.as_dict(), indent=1, default=str))
    print(f"seed {args.seed}: {len(verdict.steps)} steps, {verdict.seconds:.0f} s, "
          f"{'ok' if verdict.ok else f'{len(verdict.violations)} violations'}; log {verdict.log}")
    for v in verdict.violations:
        print(f"  violation: {v[:400]}")
    if verdict.ok:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if verdict.ok else 1


def _child(broker, out: Path, seed: int, steps: int | None = None, classic: bool = False) -> dict:
    argv = [sys.executable, "-m", "tests.campaign", "--seed", str(seed), "--out", str(out),
            "--broker-port", str(broker.port), "--broker-home", str(broker.home)]
    argv += ["--steps", str(steps)] if steps else []
    argv += ["--classic"] if classic else []
    child = subprocess.Popen(argv, cwd=ROOT, start_new_session=True)
    try:
        child.wait(timeout=BUDGET_S)
    except subprocess.TimeoutExpired:  # the history, its JVM and its streams: the whole process group
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    found = out / (f"{seed}" + (f"-{steps}" if steps else "") + ".json")
    if not found.exists():
        why = (f"wedged: the history did not end within its budget of {BUDGET_S} s" if child.returncode == -9
               else f"the history's process ended ({child.returncode}) without a verdict")
        return {"seed": seed, "steps": [], "violations": [why], "faults": {}, "commands": {}, "seconds": 0}
    return json.loads(found.read_text())


def _campaign(args) -> int:
    """Seeds first-seed .. first-seed + histories - 1; each failure shrunk; summary.json and summary.md in --out."""
    from switchyard.deploy import kafka_broker
    from tests.campaign.run import shortest_failing_prefix

    out = args.out or Path(tempfile.mkdtemp(prefix="switchyard-campaign-"))
    out.mkdir(parents=True, exist_ok=True)
    broker = _started_broker(out / "kafka")
    started, verdicts, failures = time.monotonic(), [], []
    try:
        for seed in range(args.first_seed, args.first_seed + args.histories):
            if args.minutes is not None and time.monotonic() - started > args.minutes * 60:
                print(f"--minutes {args.minutes:g} passed: no new history", flush=True)
                break
            verdict = _child(broker, out, seed, classic=args.classic)
            verdicts.append(verdict)
            if verdict["violations"]:
                length = len(verdict["steps"])
                shortest = shortest_failing_prefix(
                    lambda k: k == length or bool(_child(broker, out, seed, k, args.classic)["violations"]), length)
                failures.append({"seed": seed, "steps": length, "shortest_failing_prefix": shortest,
                                 "replay": f"python -m tests.campaign --seed {seed} --steps {shortest}"
                                           + (" --classic" if args.classic else ""),
                                 "violations": verdict["violations"][:5]})
            print(f"{len(verdicts)}/{args.histories} histories, {len(failures)} failing, "
                  f"{time.monotonic() - started:.0f} s", flush=True)
    finally:
        kafka_broker.stop(broker)
    summary = {
        "histories": len(verdicts), "seeds": f"{args.first_seed}..{args.first_seed + len(verdicts) - 1}",
        "histories_of": "the first campaign (--classic)" if args.classic else "every surface",
        "command": "python -m tests.campaign " + " ".join(sys.argv[1:]),
        "seconds": round(time.monotonic() - started),
        "steps": sum(len(v["steps"]) for v in verdicts),
        "families": dict(Counter(v.get("family", "json") for v in verdicts).most_common()),
        "faults_by_kind": dict(sum((Counter(v["faults"]) for v in verdicts), Counter()).most_common()),
        "commands_by_kind": dict(sum((Counter(v["commands"]) for v in verdicts), Counter()).most_common()),
        "outcomes": dict(Counter(o["result"] for v in verdicts for o in v.get("outcomes", [])).most_common()),
        "failing": failures,
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print(json.dumps(summary, indent=1))
    return 0 if not failures else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.steps is not None and args.seed is None:
        _parser().error("--steps goes with --seed")
    return _one(args) if args.seed is not None else _campaign(args)


if __name__ == "__main__":
    sys.exit(main())
