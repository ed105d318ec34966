"""One history from its seed, start to verdict; and the shortest prefix of a failing history that still fails."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tests.campaign.check import invariants, way_on
from tests.campaign import registry
from tests.campaign.history import family_of, generate
from tests.campaign.world import World, run_step


@dataclass
class Verdict:
    seed: int
    steps: list[str]
    violations: list[str]
    outcomes: list[dict] = field(default_factory=list)
    faults: dict[str, int] = field(default_factory=dict)
    commands: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    log: str = ""
    surfaces: bool = True  # the history is over every surface (False: the first campaign's, `--classic`)
    family: str = "json"  # its records: the demo's JSON, or a team's Avro pipeline's under a schema registry

    @property
    def ok(self) -> bool:
        return not self.violations

    def replay(self) -> str:
        return (f"python -m tests.campaign --seed {self.seed} --steps {len(self.steps)}"
                + ("" if self.surfaces else " --classic"))

    def as_dict(self) -> dict:
        return {**asdict(self), "replay": self.replay()}


def run_history(spark, broker, root: Path, seed: int, steps: int | None = None, surfaces: bool = True) -> Verdict:
    """Run the history of `seed` (its first `steps` steps, when given), the way on, and the invariants; `surfaces`:
    a history over every surface (False: the first campaign's)."""
    history = generate(seed, surfaces=surfaces)
    history = history[:steps] if steps is not None else history
    root.mkdir(parents=True, exist_ok=True)
    world, started = World(broker, root, family=family_of(seed, surfaces)), time.monotonic()
    rng = random.Random(seed * 7919 + 1)
    try:
        for step in history:
            run_step(world, step, rng)
        way_on(world)
        if not any(v.startswith("wedged") for v in world.violations):
            world.violations += (registry.invariants if world.registry else invariants)(spark, world)
    finally:
        world.end()
    return Verdict(seed, [str(s) for s in history], world.violations, [asdict(o) for o in world.outcomes],
                   world.faults, world.commands, round(time.monotonic() - started, 1), str(world.log_path), surfaces,
                   world.family)


def shortest_failing_prefix(fails: Callable[[int], bool], length: int) -> int:
    """The fewest steps of a failing history of `length` steps that still fail (assuming a longer prefix of a
    failing one fails too): a binary search, each probe a run of that prefix."""
    lo, hi = 1, length  # the full history fails
    while lo < hi:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi
