"""How the bench's cost grows with size: each arm's wall time against the events written (log-log) and B's JVM
peak beside it (flat when the sort spills rather than grows), charted from several `bench --json` results."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from benchmarks.harness import pyplot, save_figure, write_json
from state_handoff.errors import UserError

ARMS = (("streaming_only", "A streaming-only", "#b0b0b0"), ("switchyard", "B switchyard", "#2a7ab9"),
        ("batch_only", "C batch-only", "#6fbf73"), ("batch_full", "C, every table", "#a9d8ab"))


def scaling(results: list[dict]) -> dict:
    """Wall time per arm and B's JVM peak at each size, from bench JSON results (full or `--arms` runs)."""
    sizes: dict[int, dict] = {}
    for result in results:
        row = sizes.setdefault(result["events"], {"events": result["events"]})
        for mode, _label, _color in ARMS:
            run = result["runs"].get(mode)
            if run:
                row[f"{mode}_s"] = run["seconds"]
                row[f"{mode}_jvm_mb"] = run["peak_jvm_mb"]
    return {"sizes": [sizes[n] for n in sorted(sizes)]}


def _chart(rows: list[dict], chart: str) -> None:
    fig, (times, memory) = pyplot().subplots(1, 2, figsize=(10, 4), gridspec_kw={"width_ratios": [3, 2]})
    for mode, label, color in ARMS:
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
    save_figure(fig, chart)


def run_scaling(json_files: list[str], chart: str, out=print) -> dict:
    """The chart at `chart`, its table beside it (.json) and printed."""
    results = []
    for name in json_files:
        try:
            results.append(json.loads(Path(name).read_text()))
        except (OSError, ValueError) as err:
            raise UserError(f"{name}: not a bench result ({err}); give files `python -m benchmarks bench --json` "
                            "wrote") from None
    table = scaling(results)
    rows = table["sizes"]
    _chart(rows, chart)
    out(f"{'events':>12} " + " ".join(f"{label:>16}" for _, label, _ in ARMS) + f" {'B JVM MB':>9}")
    for r in rows:
        out(f"{r['events']:>12,} " + " ".join(f"{r[f'{m}_s']:>15.1f}s" if f"{m}_s" in r else f"{'-':>16}"
                                              for m, _, _ in ARMS)
            + f" {r.get('switchyard_jvm_mb', '-'):>9}")
    write_json(Path(chart).with_suffix(".json"), table)
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scaling", description=__doc__)
    parser.add_argument("results", nargs="+", metavar="FILE", help="bench results at different --events")
    parser.add_argument("--chart", required=True, metavar="PNG", help="the chart to write (its table beside it, .json)")
    args = parser.parse_args(argv)
    run_scaling(args.results, args.chart)
    return 0
