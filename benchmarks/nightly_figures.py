"""What the nightly benchmarks share (benchmarks/nightly.py, and under a live stream benchmarks/nightly_live.py): the
pipeline, the goal, a timed step, a warehouse's committed backfills, and the figures and verdict they report."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from benchmarks.harness import write_json

PIPELINE = "demo"
GOAL = 0.10  # the new day at most this share of a full backfill
SUM_TOLERANCE = 1e-9  # relative: the same amounts summed in another order


def timed(label: str, step, marks: list[str]):
    """step(out) run, its label and seconds printed, the indented lines it printed kept in `marks`; its result and
    seconds."""
    lines: list[str] = []
    started = time.monotonic()
    result = step(lines.append)
    seconds = round(time.monotonic() - started, 2)
    print(f"  {label}: {seconds:.1f} s", flush=True)
    marks.extend(f"    {line}" for line in lines if line.startswith("  "))
    return result, seconds


def _commits(tables) -> list:
    """BACKFILL_COMMITTED's details, in order: where each run's seconds went."""
    from switchyard.state_handoff.control import details, handoff_log
    from switchyard.state_handoff.control.lifecycle import Status

    return [details.of(e) for e in handoff_log.entries(tables) if e.status == Status.BACKFILL_COMMITTED]


def steps(tables) -> list[dict]:
    """Each committed backfill of a warehouse: its days, seconds, and the tiles run's and the commit's steps."""
    return [{"days": f"{d.from_}..{d.to}", "seconds": d.duration_s, "tiles_s": d.tiles_s, "commit_s": d.commit_s}
            for d in _commits(tables)]


def figures_of(params: dict, argv: list[str]) -> dict:
    """What a nightly run's JSON begins with: its parameters, the goal, when, where and the command."""
    return {"params": params, "goal": {"new_day_share_at_most": GOAL},
            "started_at": datetime.now(UTC).isoformat(timespec="seconds"), "host_cpus": os.cpu_count(),
            "command": "python -m benchmarks nightly " + " ".join(argv)}


def report(figures: dict, result: dict, json_file: str | None) -> int:
    """The verdict printed, and with every figure written to `json_file`; 1 when the states differ."""
    figures["result"] = result
    exact = result["states"]["keys_different"] == 0
    met = result["new_day_share"] <= GOAL and exact
    figures["goal"]["met"] = met
    print(f"\nfull backfill of {result['days']} days ({result['records']:,} records): {result['full_backfill_s']:.1f} s"
          f"\nthe new day ({result['records_of_the_day']:,} records): {result['new_day_s']:.1f} s "
          f"= {result['new_day_share']:.1%} of it (goal <= {GOAL:.0%}: {'met' if met else 'missed'})"
          f"\nthe same day again over itself (every tile merged): {result['day_again_s']:.1f} s "
          f"= {result['day_again_share']:.1%}"
          f"\nstates of the two warehouses: {result['states']['keys_different']} of {result['states']['keys']:,} "
          "keys different", flush=True)
    if json_file:
        write_json(json_file, figures)
    return 0 if exact else 1
