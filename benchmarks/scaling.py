"""How the bench's cost grows with size: each arm's wall time against the events written (log-log), B / C-every-table
(measured within one run, so comparable across days a machine runs at different speeds) and B's JVM peak (flat when
the sort spills rather than grows), charted from several `bench --json` results. Results of different Spark
versions draw one line per arm and version: the newest solid, older ones dashed or dotted."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

from benchmarks.harness import pyplot, save_figure, write_json
from switchyard.state_handoff.errors import UserError

ARMS = (("streaming_only", "A streaming-only", "#b0b0b0"), ("switchyard", "B switchyard", "#2a7ab9"),
        ("batch_only", "C batch-only", "#6fbf73"), ("batch_full", "C, every table", "#a9d8ab"))
#: Line styles of the Spark versions, newest first; results without a version (written before the bench recorded
#: it) come last.
STYLES = (("-", "o"), ("--", "s"), (":", "^"), ("-.", "D"))
UNKNOWN = "unknown"


def _version_order(version: str | None) -> tuple:
    """Oldest first; an unknown version before every known one."""
    return (0,) if version is None else (1, *(int(n) for n in re.findall(r"\d+", version)))


def scaling(results: list[dict]) -> dict:
    """Wall time per arm and B's JVM peak at each size and Spark version (None where a result does not say), from
    bench JSON results (full or `--arms` runs)."""
    sizes: dict[tuple, dict] = {}
    for result in results:
        version = result.get("spark_version")
        row = sizes.setdefault((result["events"], version), {"events": result["events"], "spark_version": version})
        if result.get("delta_version"):
            row["delta_version"] = result["delta_version"]
        for mode, _label, _color in ARMS:
            run = result["runs"].get(mode)
            if run:
                row[f"{mode}_s"] = run["seconds"]
                row[f"{mode}_jvm_mb"] = run["peak_jvm_mb"]
        if "switchyard_s" in row and "batch_full_s" in row:
            row["switchyard_over_batch_full"] = round(row["switchyard_s"] / row["batch_full_s"], 3)
    order = sorted(sizes, key=lambda size: (size[0], _version_order(size[1])))
    return {"sizes": [sizes[size] for size in order]}


def _spark(version: str | None) -> str:
    """`Spark 4.2.0`, as a label says it."""
    return f"Spark {version}" if version else "Spark version unknown"


def _versions(rows: list[dict]) -> list[str | None]:
    """The Spark versions of the rows, newest first."""
    return sorted({r["spark_version"] for r in rows}, key=_version_order, reverse=True)


def _chart(rows: list[dict], chart: str) -> None:
    fig, (times, ratio, memory) = pyplot().subplots(1, 3, figsize=(15, 4.5), gridspec_kw={"width_ratios": [3, 2, 2]})
    versions = _versions(rows)
    several = len(versions) > 1
    styles = dict(zip(versions, STYLES * len(versions)))
    for mode, label, color in ARMS:
        for version, (line, marker) in styles.items():
            points = [(r["events"], r[f"{mode}_s"]) for r in rows
                      if r["spark_version"] == version and f"{mode}_s" in r]
            if points:
                times.plot(*zip(*points), marker=marker, linestyle=line, color=color,
                           label=f"{label}, {_spark(version)}" if several else label)
    for version, (line, marker) in styles.items():
        ratios = [(r["events"], r["switchyard_over_batch_full"]) for r in rows
                  if r["spark_version"] == version and "switchyard_over_batch_full" in r]
        if ratios:
            ratio.plot(*zip(*ratios), marker=marker, linestyle=line, color="#2a7ab9",
                       label=_spark(version) if several else None)
        peaks = [(r["events"], r["switchyard_jvm_mb"]) for r in rows
                 if r["spark_version"] == version and "switchyard_jvm_mb" in r]
        if peaks:
            memory.plot(*zip(*peaks), marker=marker, linestyle=line, color="#2a7ab9",
                        label=_spark(version) if several else None)
    times.set_xscale("log")
    times.set_yscale("log")
    times.set_xlabel("events written")
    times.set_ylabel("wall time to an up-to-date state (s)")
    times.legend(fontsize="small")
    times.grid(True, which="both", alpha=0.3)
    ratio.set_xscale("log")
    ratio.axhline(1.0, color="#a9d8ab", linewidth=1)
    ratio.set_xlabel("events written")
    ratio.set_ylabel("B / C, every table")
    ratio.grid(True, which="both", alpha=0.3)
    if ratio.get_legend_handles_labels()[0]:  # a line per Spark version, labelled when there are several
        ratio.legend(fontsize="small")
    all_peaks = [r["switchyard_jvm_mb"] for r in rows if "switchyard_jvm_mb" in r]
    if all_peaks:
        memory.set_xscale("log")
        memory.set_ylim(0, max(all_peaks) * 1.3)
        if several:
            memory.legend(fontsize="small")
    memory.set_xlabel("events written")
    memory.set_ylabel("B's JVM peak RSS (MB)")
    memory.grid(True, which="both", alpha=0.3)
    spark = "" if several or versions[0] is None else f", {_spark(versions[0])}"
    fig.suptitle(f"switchyard bench, {os.cpu_count()} cores{spark}: cost against size")
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
    out(f"{'events':>12} {'Spark':>8} " + " ".join(f"{label:>16}" for _, label, _ in ARMS)
        + f" {'B JVM MB':>9} {'B/C-full':>8}")
    for r in rows:
        out(f"{r['events']:>12,} {r['spark_version'] or UNKNOWN:>8} "
            + " ".join(f"{r[f'{m}_s']:>15.1f}s" if f"{m}_s" in r else f"{'-':>16}" for m, _, _ in ARMS)
            + f" {r.get('switchyard_jvm_mb', '-'):>9}"
            + (f" {r['switchyard_over_batch_full']:>8.2f}" if "switchyard_over_batch_full" in r else f" {'-':>8}"))
    write_json(Path(chart).with_suffix(".json"), table)
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks scaling", description=__doc__)
    parser.add_argument("results", nargs="+", metavar="FILE", help="bench results at different --events")
    parser.add_argument("--chart", required=True, metavar="PNG", help="the chart to write (its table beside it, .json)")
    args = parser.parse_args(argv)
    run_scaling(args.results, args.chart)
    return 0
