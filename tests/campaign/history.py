"""A history from a seed: a random but valid sequence of steps, chosen against a model of where the pipeline stands
(nothing yet, archived, backfilled, handed off, a stream live), so most steps are ones a team would really run at
that point and the rest are the mistakes and faults it meets. The same seed always gives the same history."""

from __future__ import annotations

import json
import random
from dataclasses import asdict, dataclass, field

from switchyard.state_handoff import faults

RECORD_KINDS = ("normal", "malformed", "late", "out_of_order", "hostile", "burst")
# the named crash points each command can reach (state_handoff/faults.py)
CRASH_POINTS = {
    "backfill": [p for p in faults.POINTS if p.startswith("backfill.")],
    "handoff": ["handoff.before_log"],
    "stream": [p for p in faults.POINTS if p.startswith("stream.")],
    "rebase": ["rebase.after_pause", "rebase.after_backfill", "backfill.after_tiles", "backfill.after_state"],
}
FAULTS = ("crash", "kill_live", "takeover", "broker_bounce", "retention", "corrupt", "add_partition", "race",
          "setting")


@dataclass(frozen=True)
class Step:
    op: str
    args: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return self.op + (" " + json.dumps(self.args, sort_keys=True) if self.args else "")

    @property
    def is_fault(self) -> bool:
        return self.op in FAULTS


@dataclass
class Model:
    """What the generator believes about the pipeline, assuming each step does what it should."""

    archived: bool = False
    backfilled: bool = False
    handed_off: bool = False
    live: bool = False
    corrupt: bool = False
    partitions: int = 2


def _produce(rng: random.Random, model: Model) -> Step:
    kind = rng.choices(RECORD_KINDS, weights=(6, 2, 2, 2, 2, 1))[0]
    count = rng.randint(1500, 3000) if kind == "burst" else rng.randint(20, 200)
    return Step("produce", {"kind": kind, "count": count, "seed": rng.randrange(1 << 30)})


def _choices(rng: random.Random, m: Model) -> list[tuple[float, Step]]:
    """Each step that makes sense now, with its weight."""
    options = [(3.0, _produce(rng, m)), (0.3, Step("add_partition")), (0.3, Step("broker_bounce",
                                                                               {"seconds": rng.choice((3, 8, 15))}))]
    if not m.live:
        options.append((0.4 if m.archived else 2.0, Step("archive", {"fraction": rng.choice((0.3, 0.5, 0.7,
                                                                                                 0.9, 1.0))})))
    if m.archived:
        options.append((0.5, Step("retention", {"share": rng.choice((0.3, 0.6, 1.0))})))
        if not m.corrupt:
            options.append((0.3, Step("corrupt")))
    if m.corrupt:
        options.append((1.5, Step("repair")))
    if m.archived and not m.handed_off:
        day = rng.choice(("2026-03-01", "2026-03-02"))
        options.append((0.5 if m.backfilled else 3.0, Step("backfill")))
        options.append((0.8, Step("backfill", {"from": day, "to": day})))  # a ranged one: the handoff wants the rest
        options.append((0.5, Step("crash", {"command": "backfill", "point": rng.choice(CRASH_POINTS["backfill"])})))
    if m.backfilled and not m.handed_off:
        options.append((3.0, Step("handoff")))
        options.append((0.5, Step("crash", {"command": "handoff", "point": "handoff.before_log"})))
    if m.handed_off and not m.live:
        options += [(2.0, Step("stream", {"until_caught_up": True})),
                    (0.8, Step("stream", {"for": rng.choice((5, 12))})),
                    (3.0, Step("start_live", _live_flags(rng))),
                    (0.8, Step("rebase", {"days": rng.random() < 0.3})),
                    (0.8, Step("crash", {"command": "stream", "point": _nth(rng, CRASH_POINTS["stream"])})),
                    (0.6, Step("crash", {"command": "rebase", "point": rng.choice(CRASH_POINTS["rebase"])})),
                    (0.4, Step("setting", rng.choice(({"state_partitions": rng.choice((1, 3))},
                                                      {"max_record_bytes": 2 * 1024 * 1024}))))]
    if m.live:
        options += [(1.5, Step("wait", {"seconds": rng.choice((3, 8))})),
                    (0.8, Step("stop", {"how": rng.choice(("command", "sigterm"))})),
                    (1.0, Step("rebase", {"days": rng.random() < 0.3})),
                    (0.5, Step("backfill")),
                    (0.6, Step("kill_live")),
                    (0.7, Step("takeover")),
                    (0.8, Step("race", {"command": rng.choice(("stream", "handoff", "archive"))}))]
    return options


def _live_flags(rng: random.Random) -> dict:
    flags = {"max_offsets_per_trigger": rng.choice((100, 500, 5000))}
    if rng.random() < 0.3:  # a switch back within reach of a burst
        flags.update(switch_back_lag=rng.choice((300, 1000)), switch_back_after=2)
    return flags


def _nth(rng: random.Random, points: list[str]) -> str:
    point = rng.choice(points)
    return point if rng.random() < 0.6 else f"{point}:{rng.randint(2, 3)}"


def _apply(m: Model, step: Step) -> None:
    op = step.op
    if op == "archive":
        m.archived = True
    elif op == "backfill" and not m.handed_off:
        m.backfilled = True
    elif op == "handoff":
        m.handed_off = True
    elif op == "start_live":
        m.live = True
    elif op in ("stop", "kill_live"):
        m.live = False
    elif op == "corrupt":
        m.corrupt = True
    elif op == "repair":
        m.corrupt = False
    elif op == "add_partition":
        m.partitions += 1


def generate(seed: int, length: int | None = None) -> list[Step]:
    """The history of `seed`: some records first, then `length` (default 8 to 16) steps."""
    rng = random.Random(seed)
    model = Model()
    steps = [Step("produce", {"kind": "normal", "count": rng.randint(300, 900), "seed": rng.randrange(1 << 30)})]
    for _ in range(length if length is not None else rng.randint(8, 16)):
        options = _choices(rng, model)
        step = rng.choices([s for _, s in options], weights=[w for w, _ in options])[0]
        steps.append(step)
        _apply(model, step)
        if step.op == "crash" and rng.random() < 0.7:  # the documented way on: the same command again
            again = Step(step.args["command"], {"until_caught_up": True} if step.args["command"] == "stream" else {})
            steps.append(again)
            _apply(model, again)
    return steps


def describe(steps: list[Step]) -> list[str]:
    return [str(s) for s in steps]


def as_json(steps: list[Step]) -> list[dict]:
    return [asdict(s) for s in steps]
