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
    verdict = run_history(spark, broker, tmp_path, seed, surfaces=False)
    assert verdict.ok, (f"seed {seed}: replay with `{verdict.replay()}`; log {verdict.log}\n"
                        + "\n".join(verdict.violations))


def _streamed(spark, broker, tmp_path, fraction: float, tail: Step) -> World:
    """A world archived to `fraction`, backfilled, handed off, given `tail`'s records and brought streaming by the
    way on, its invariants holding."""
    world = World(broker, tmp_path)
    for step in [Step("produce", {"kind": "normal", "count": 300, "seed": 1}), Step("archive", {"fraction": fraction}),
                 Step("backfill"), Step("handoff"), tail]:
        run_step(world, step, None)
    way_on(world)
    assert world.violations == [] and invariants(spark, world) == []
    return world


def test_the_checker_finds_a_record_counted_twice_and_a_wedge(spark, broker, tmp_path):
    """The invariants are not vacuous: a record aggregated twice is found, and so is a pipeline the way on cannot
    get streaming."""
    world = _streamed(spark, broker, tmp_path, 0.7, tail=Step("produce", {"kind": "malformed", "count": 20,
                                                                          "seed": 2}))
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


def test_the_checker_finds_a_stale_topic_record_a_metric_that_disagrees_and_a_secret(spark, broker, tmp_path):
    """The invariants of every output are not vacuous: a key's newest record on the updates topic that is not its
    `state` row is found, so is a metric that disagrees with `switchyard status`, and so is the history's secret in
    a log line or on a process's command line."""
    import json
    import subprocess
    import sys
    import time

    from kafka import KafkaConsumer

    from switchyard.state_handoff.control.lifecycle import Phase
    from switchyard.state_handoff.control.status import pipeline_status
    from switchyard.state_handoff.control.view import PipelineView
    from switchyard.state_handoff.io.kafka_io import produce
    from tests.campaign.surfaces import cmdline_sightings, metrics_differences, secret_sightings

    world = _streamed(spark, broker, tmp_path, 0.6, tail=Step("produce", {"kind": "normal", "count": 60, "seed": 4}))

    topic = PipelineView.read(world.tables).updates_topic
    consumer = KafkaConsumer(topic, bootstrap_servers=world.bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=5000)
    record = next(r for r in consumer if r.value is not None)
    consumer.close()
    value = json.loads(record.value)
    value["event_count"] += 1
    produce(world.bootstrap, topic, [(record.key, json.dumps(value).encode(), record.partition, None)])
    assert any("keys stale on" in v for v in invariants(spark, world))

    status = dict(pipeline_status(world.tables, world.bootstrap), phase_name=Phase.FAILED.name)
    scraped = "\n".join(f'switchyard_phase{{pipeline="demo",phase="{p.name}"}} {int(p == Phase.CAUGHT_UP)}'
                        for p in Phase) + "\n"
    assert any(v.startswith("metrics: phase ['CAUGHT_UP'], status FAILED")
               for v in metrics_differences(world, scraped, status))

    assert secret_sightings(world) == []
    world.log(f"a line that prints the JVM options: {world.env['SWITCHYARD_JVM_OPTIONS']}")
    shown = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", world.secret])
    try:
        for _ in range(50):  # until the child has exec'd
            if str(shown.pid) in cmdline_sightings(world):
                break
            time.sleep(0.1)
        assert str(shown.pid) in cmdline_sightings(world)
    finally:
        shown.kill()
    assert any(v.startswith("secret in a log line") for v in secret_sightings(world))
