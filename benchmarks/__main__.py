"""`python -m benchmarks <scenario> [args]`: run one benchmark scenario. `worker MODULE ARGS` is how a scenario
runs an arm in a fresh process: benchmarks.MODULE's worker(ARGS), its figures printed as one JSON line."""

from __future__ import annotations

import importlib
import json
import sys

from switchyard.jobs.cli.parser import run_reporting_errors

#: scenario -> (module, what it measures)
SCENARIOS = {
    "bench": ("benchmarks.bench", "A streaming-only vs B switchyard vs C batch-only, side by side"),
    "burst": ("benchmarks.burst", "a burst into a live stream: caught up with vs without switch back"),
    "nightly": ("benchmarks.nightly", "the nightly backfill: one new day added to an archive of many, against all "
                                      "(--live: under a live stream)"),
    "latency": ("benchmarks.latency", "stream update latency at fixed input rates"),
    "scaling": ("benchmarks.scaling", "a log-log chart of the bench's wall times against size, from bench results"),
    "sort-vs-hash": ("benchmarks.sort_vs_hash", "the backfill's sort-based tiles aggregation against Spark's hash"),
    "seeding": ("benchmarks.seeding", "seeding the stream's keyed state: seed source vs transformWithStateInPandas"),
    "stream-start": ("benchmarks.stream_start", "a stream's start to SWITCHED, in fresh processes"),
    "kafka-read": ("benchmarks.kafka_read", "a batch read of a Kafka range: fetch, parse and tiles, each timed"),
    "scan-memory": ("benchmarks.scan_memory", "the driver's memory scanning Parquet, vectored reads on and off"),
    "redeploy": ("benchmarks.redeploy", "a changed definition redeployed under a live stream vs batch-only over the "
                                        "same history"),
}


def usage() -> str:
    lines = ["usage: python -m benchmarks SCENARIO [args]   (SCENARIO --help for its flags)", "", "scenarios:"]
    lines += [f"  {name:<14} {what}" for name, (_, what) in SCENARIOS.items()]
    return "\n".join(lines)


def _module(name: str):
    return importlib.import_module(SCENARIOS[name][0])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage())
        return 0 if argv else 2
    scenario, rest = argv[0], argv[1:]
    if scenario == "worker" and rest:
        figures = importlib.import_module(f"benchmarks.{rest[0]}").worker(rest[1:])
        print(json.dumps(figures, default=str), flush=True)
        return 0
    if scenario not in SCENARIOS:
        print(f"benchmarks: error: no scenario {scenario!r}\n{usage()}", file=sys.stderr)
        return 2
    return run_reporting_errors(f"benchmarks {scenario}", lambda: _module(scenario).main(rest))


if __name__ == "__main__":
    sys.exit(main())
