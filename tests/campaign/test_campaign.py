"""The fault campaign's short mode: fixed seeds, each a whole history with its faults, the way on and the oracle's
invariants. A seed that found a violation stays here, once fixed, while the generator still makes that
history. The long mode is `python -m tests.campaign --histories N` (docs/lifecycle-and-reliability.md, "The fault
campaign")."""

from __future__ import annotations

import pytest
from delta.tables import DeltaTable

from tests.campaign.check import invariants, way_on
from tests.campaign.history import Step
from tests.campaign.run import run_history, shortest_failing_prefix
from tests.campaign.world import World, run_step

# each seed, and what its history goes through (python -m tests.campaign --seed S replays it alone)
SEEDS = {
    19: "the broker down 15 s, a backfill of one day (the handoff then wants the rest), retention up to the "
        "archive's cut, a crash before the handoff's log entry, a live stream, a burst, malformed records, a "
        "partition added, a second actor's stream, two takeovers of a frozen stream",
    26: "hostile records, a corrupted archive file, a stream for 5 s, a live stream, a takeover, a second actor's "
        "stream, a rebase of the live stream, retention",
    120: "archived to 70%, backfilled, archived to 90%, handed off, a stream for 12 s, retention up to the archive's "
         "cut (past where the events query stood: the rebase takes those records from the archive), a live stream, "
         "a second actor's archive",
}


EXTENDED = {26, 120}  # run by `make test-extended`: make test's budget holds one history


@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.extended] if s in EXTENDED else [])
                                  for s in sorted(SEEDS)])
def test_history_of_seed(spark, broker, tmp_path, seed):
    verdict = run_history(spark, broker, tmp_path, seed)
    assert verdict.ok, (f"seed {seed}: replay with `{verdict.replay()}`; log {verdict.log}\n"
                        + "\n".join(verdict.violations))


def test_the_checker_finds_a_record_counted_twice_and_a_wedge(spark, broker, tmp_path):
    """The invariants are not vacuous: a record aggregated twice is found, and so is a pipeline the way on cannot
    get streaming."""
    world = World(broker, tmp_path)
    for step in [Step("produce", {"kind": "normal", "count": 300, "seed": 1}), Step("archive", {"fraction": 0.7}),
                 Step("backfill"), Step("handoff"), Step("produce", {"kind": "malformed", "count": 20, "seed": 2})]:
        run_step(world, step, None)
    way_on(world)
    assert world.violations == [] and invariants(spark, world) == []
    DeltaTable.forPath(spark, world.tables.state).update("key = 'key-001'", {"event_count": "event_count + 1"})
    assert any(v.startswith("state of key 'key-001': count") for v in invariants(spark, world))

    (tmp_path / "wedged").mkdir()
    (tmp_path / "wedged" / "wh").write_text("a file where the warehouse should be: every command refuses")
    wedged = World(broker, tmp_path / "wedged")
    way_on(wedged)
    assert wedged.violations[-1].startswith("wedged: the way on did not get the pipeline streaming"), \
        wedged.violations


def test_a_failing_history_shrinks_to_its_shortest_failing_prefix():
    runs = []

    def fails(k: int) -> bool:
        runs.append(k)
        return k >= 6

    assert shortest_failing_prefix(fails, 13) == 6 and len(runs) <= 4
