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
    "redeploy": ["redeploy.after_tiles", "rebase.after_pause", "rebase.after_backfill", "backfill.after_state"],
}
FAULTS = ("crash", "kill_live", "takeover", "broker_bounce", "retention", "corrupt", "add_partition", "race",
          "setting", "kill_service", "kill_host", "sigterm_service", "broker_outage")


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
    served: int = 0  # services running
    stopped: bool = False  # a stop request keeps the served stream down
    definition: str = "demo"  # tests/campaign/surfaces.py's DEFINITIONS
    kept: bool = False  # a redeploy handed off keeps the definition it replaced, for `rollback`
    family: str = "json"  # or "avro": a team's Avro pipeline under a schema registry (tests/campaign/registry.py)
    registered: tuple[str, ...] = ("v1",)  # the Avro histories' versions registered so far
    subject_deleted: bool = False  # soft-deleted: the registry (Apicurio) takes no new version under it


def family_of(seed: int, surfaces: bool = True) -> str:
    """Every fourth history over every surface is an Avro one."""
    return "avro" if surfaces and seed % 4 == 0 else "json"


def _produce(rng: random.Random, model: Model) -> Step:
    if model.family == "avro":  # a registered version's records, the unreadable one's, an unknown id's, bad bytes
        kinds = ("normal", "malformed", "unknown", "burst", *[v for v in model.registered if v != "v1"])
        kind = rng.choices(kinds, weights=(6, 1, 1, 1, *[2] * (len(kinds) - 4)))[0]
        count = rng.randint(1500, 3000) if kind == "burst" else rng.randint(20, 200)
        return Step("produce", {"kind": kind, "count": count, "seed": rng.randrange(1 << 30)})
    kind = rng.choices(RECORD_KINDS, weights=(6, 2, 2, 2, 2, 1))[0]
    count = rng.randint(1500, 3000) if kind == "burst" else rng.randint(20, 200)
    return Step("produce", {"kind": kind, "count": count, "seed": rng.randrange(1 << 30)})


def _choices(rng: random.Random, m: Model, surfaces: bool) -> list[tuple[float, Step]]:
    """Each step that makes sense now, with its weight; `surfaces`: the served streams, redeploys and Dagster jobs
    too (tests/campaign/surfaces.py)."""
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
    if surfaces and m.handed_off and not m.live and not m.served:
        options += [(4.0, Step("serve")), *_redeploys(rng, m)]
    if surfaces and m.live:
        options += _redeploys(rng, m, 0.3)
    if m.family == "avro":
        options += _registry(rng, m)
    if m.served:
        options += _served(rng, m)
    if m.handed_off and not m.live and not m.served:
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


def _registry(rng: random.Random, m: Model) -> list[tuple[float, Step]]:
    """What happens to the schema registry: a version registered (while a stream runs, as often as not), the
    subject soft-deleted, the registry down and back."""
    options = [(0.5, Step("registry_down", {"seconds": rng.choice((5, 20, 45))})), (0.25, Step("delete_subject"))]
    unregistered = [v for v in ("v2", "v3", "text_amount") if v not in m.registered]
    if unregistered and not m.subject_deleted:
        options.append((0.9, Step("register", {"version": rng.choice(unregistered)})))
    return options


def _redeploys(rng: random.Random, m: Model, weight: float = 0.5) -> list[tuple[float, Step]]:
    if m.family == "avro":
        return []  # the Avro pipeline has one definition here
    other = "plus_one" if m.definition == "demo" else "demo"
    options = [(weight, Step("redeploy", {"to": other})),
               (weight * 0.5, Step("crash", {"command": "redeploy", "point": rng.choice(CRASH_POINTS["redeploy"]),
                                             "to": other}))]
    if m.kept:
        options += [(weight, Step("rollback")), (weight * 0.3, Step("drop_previous"))]
    return options


def _served(rng: random.Random, m: Model) -> list[tuple[float, Step]]:
    """What happens to a served pipeline: the commands and Dagster jobs that steer it, and the faults of its
    services."""
    options = [(1.0, Step("wait", {"seconds": rng.choice((3, 8))})),
               (0.8, Step("rebase", {"days": rng.random() < 0.3})),
               (0.4, Step("backfill")),
               (0.8, Step("scrape")),
               (0.8, Step("kill_service")),
               (0.8, Step("kill_host")),
               (0.9, Step("sigterm_service", {"during_rebase": rng.random() < 0.5})),
               (0.5, Step("broker_outage", {"seconds": rng.choice((40, 60))})),
               (0.6, Step("dagster", {"job": "rebase_stream"})),
               *_redeploys(rng, m, 0.8)]
    if m.served < 2:  # a standby, on this host or another
        options.append((0.8, Step("serve", {"host": "other"} if rng.random() < 0.5 else {})))
    if m.stopped:
        options += [(1.5, Step("start")), (0.8, Step("dagster", {"job": "start_stream"}))]
    else:
        options += [(0.7, Step("stop", {"how": "command"})), (0.6, Step("dagster", {"job": "stop_stream"}))]
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
    elif op == "serve":
        m.served += 1
    elif op in ("kill_service", "kill_host", "sigterm_service"):
        m.served = max(0, m.served - 1)
    elif op == "stop" and m.served:
        m.stopped = True
    elif op == "start" or (op == "dagster" and step.args["job"] == "start_stream"):
        m.stopped = False
    elif op == "dagster" and step.args["job"] == "stop_stream":
        m.stopped = True
    elif op in ("redeploy", "rollback"):  # the live stream stopped; a service started again under the definition
        m.live = False
        m.definition = step.args.get("to") or ("plus_one" if m.definition == "demo" else "demo")
        m.kept = True
    elif op == "drop_previous":
        m.kept = False
    elif op == "register":
        m.registered += (step.args["version"],)
    elif op == "delete_subject":
        m.subject_deleted = True
    elif op in ("stop", "kill_live"):
        m.live = False
    elif op == "corrupt":
        m.corrupt = True
    elif op == "repair":
        m.corrupt = False
    elif op == "add_partition":
        m.partitions += 1


def generate(seed: int, length: int | None = None, surfaces: bool = True) -> list[Step]:
    """The history of `seed`: some records first, then `length` (default 8 to 16) steps; `surfaces`: over every
    surface, the served streams, redeploys and Dagster jobs included, with 4 to 10 more steps once handed off (False:
    the histories of the first campaign, which the short mode's earlier seeds replay)."""
    rng = random.Random(seed)
    model = Model(family=family_of(seed, surfaces))
    steps = [Step("produce", {"kind": "normal", "count": rng.randint(300, 900), "seed": rng.randrange(1 << 30)})]
    count = length if length is not None else rng.randint(8, 16)
    more = rng.randint(4, 10) if surfaces and length is None else 0
    taken = 0
    while taken < count + (more if model.handed_off else 0):
        taken += 1
        options = _choices(rng, model, surfaces)
        step = rng.choices([s for _, s in options], weights=[w for w, _ in options])[0]
        steps.append(step)
        _apply(model, step)
        if step.op == "crash" and rng.random() < 0.7:  # the documented way on: the same command again
            command = step.args["command"]
            again = Step(command, {"until_caught_up": True} if command == "stream" else
                         {"to": step.args["to"]} if command == "redeploy" else {})
            steps.append(again)
            _apply(model, again)
    return steps


def describe(steps: list[Step]) -> list[str]:
    return [str(s) for s in steps]


def as_json(steps: list[Step]) -> list[dict]:
    return [asdict(s) for s in steps]
