"""After a history: the documented way on, then the tables against the oracle's boundary-free invariants.

The way on is what the docs tell an operator: stop a live stream, repair a corrupted archive file, archive, backfill
and hand off what has not been, then `switchyard stream --until-caught-up`; a refusal on the way is followed by the
command it names (one of `WAY_ON`), at most three times. Not streaming caught up at the end is a wedge.

The invariants hold whatever the stream's batches were: every record Kafka ever held is dead-lettered for the
oracle's reason or aggregated, exactly once; each key's state is the oracle's over every well-formed record; per
window, what the final and open window tables hold plus the records dead-lettered as late is the oracle's window;
no window in both tables; a late record's window ended before the newest event time less the lateness; each key's
newest record on the updates topic is its `state` row; the history's secret shows in no log line, metric, status or
command line. A served pipeline's way on is docs/operating.md's (tests/campaign/surfaces.py: way_on_served), and its
metrics agree with `switchyard status` once it is caught up."""

from __future__ import annotations

import re
from collections import Counter

from types import SimpleNamespace

from switchyard.state_handoff.control import handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from tests.campaign.surfaces import (recorded_definition, running_services, secret_sightings, start_service,
                                     stop_services, way_on_served)
from tests.campaign.world import STREAM_FLAGS, World
from tests.support import oracle
from tests.support.compare import close, rows, updates_topic_differences

_NO_REQUEST = SimpleNamespace(redeploy=None)

# the commands a refusal may name as the way on, as the campaign runs them
WAY_ON = {
    "switchyard rebase --abandon": ["rebase", "--abandon"],
    "switchyard stream --until-caught-up": ["stream", *STREAM_FLAGS, "--until-caught-up"],
    "switchyard archive": None,  # with the topic and a cut: see _archive
    "switchyard backfill": ["backfill", "--timeout", "240"],
    "switchyard handoff": ["handoff"],
    "switchyard handoff --restart-from-retained": ["handoff", "--restart-from-retained"],
    "switchyard rebase": ["rebase", "--timeout", "240"],
    "switchyard start": ["start"],
    "switchyard redeploy": None,  # under the definition the open redeploy request moves to: see _finish_redeploy
}
NAMED = re.compile(r"`(switchyard [a-z-]+(?: --[a-z-]+)?)")


def _archive(world: World, step: str):
    return world.cli(step, ["archive", "--topic", world.topic, "--fraction", "0.5"])


def _named_command(detail: str) -> list[str] | None:
    for named in NAMED.findall(detail):
        for text in (named, named.rsplit(" --", 1)[0]):
            if text in WAY_ON:
                return [text.split()[1]] if WAY_ON[text] is None else WAY_ON[text]
    return None


def _owner(world: World):
    try:
        return lease.owner(world.tables)
    except Exception:  # noqa: BLE001 - as _open_request
        return None


def _open_request(world: World):
    try:
        return PipelineView.read(world.tables).ledger.open_rebase
    except Exception:  # noqa: BLE001 - tables no command can read (a wedge's): the commands' own refusals say why
        return None


def _finish_redeploy(world: World, step: str) -> None:
    """An open redeploy request is finished by `switchyard redeploy` under the definition it moves to (its
    refusals say so); the commands after it run under that definition."""
    from tests.campaign.surfaces import definition_for_version

    request = _open_request(world)
    to = definition_for_version(request.redeploy.version) if request and request.redeploy else None
    if to is not None:
        world.definition = to
        world.cli(step, ["redeploy", "--timeout", "240"])
    world.definition = recorded_definition(world)


def _has(world: World, status: str) -> bool:
    return handoff_log.latest(world.tables, status) is not None


def way_on(world: World) -> None:
    """Bring the pipeline to streaming caught up as the docs say; a violation when it cannot be done."""
    if world.live_running():
        world.stop_live("command", "way on: stop")
    if world.corrupted:
        world.repair()
        world.log("way on: repaired the corrupted archive files")
    world.stream_settings = []
    if (_open_request(world) or _NO_REQUEST).redeploy is not None:
        served = len(running_services(world))
        stop_services(world, "way on: stop the services")
        _finish_redeploy(world, "way on: redeploy")
        for _ in range(served):  # deployed again with the changed code
            start_service(world, "way on: serve")
    world.definition = recorded_definition(world)
    if not _has(world, Status.HANDOFF_COMMITTED):  # a service waits for a handoff
        if world.archived_end() == {}:
            _archive(world, "way on: archive")
        if not _has(world, Status.BACKFILL_COMMITTED):
            world.cli("way on: backfill", ["backfill"])
        handoff = world.cli("way on: handoff", ["handoff"])
        if handoff.result == "refused" and _named_command(handoff.detail) == WAY_ON["switchyard backfill"]:
            world.cli("way on: backfill", WAY_ON["switchyard backfill"])  # e.g. a ranged backfill left days out
            world.cli("way on: handoff", ["handoff"])
    if running_services(world) or world.served_ever:  # a served pipeline: its services are how it streams
        way_on_served(world)
    owner = _owner(world)
    if owner is not None and owner.command == lease.STREAM:  # a stream whose service was killed streams on
        world.cli("way on: stop", ["stop", "--timeout", "180"])
    world.close()
    world.definition = recorded_definition(world)
    for attempt in range(4):
        outcome = world.cli("way on: stream --until-caught-up", ["stream", *STREAM_FLAGS, "--until-caught-up"])
        if outcome.result == "ok":
            return
        named = _named_command(outcome.detail)
        if named is None or attempt == 3:
            break
        if named == ["archive"]:
            _archive(world, "way on: archive")
        elif named == ["redeploy"]:
            _finish_redeploy(world, "way on: redeploy")
        else:
            world.cli(f"way on: {' '.join(named[:2])}", named)
    last = world.outcomes[-1]
    world.violations.append(f"wedged: the way on did not get the pipeline streaming: {last.step} -> {last.result} "
                            f"{last.detail}")


def invariants(spark, world: World) -> list[str]:
    """What the tables must hold after the way on, against the oracle over every record the topic ever held."""
    records = world.read_all()
    by_position = {(r.partition, r.offset): r for r in records}
    expected = oracle.backlog(records)  # every well-formed record in its window, every malformed one dead-lettered
    tables, found = world.tables, []

    dead_rows = rows(spark, tables.dead_letter)
    dead_count = Counter((r.kafka_partition, r.kafka_offset) for r in dead_rows)
    found += [f"dead-lettered {n} times: {k}" for k, n in dead_count.items() if n > 1][:5]
    dead = {(r.kafka_partition, r.kafka_offset): r.reason for r in dead_rows}
    missing = sorted(set(expected.dead_letter) - set(dead))
    extra = sorted(set(dead) - set(expected.dead_letter))
    wrong = [(k, dead[k], why) for k, why in expected.dead_letter.items() if k in dead and dead[k] != why]
    found += [f"not dead-lettered: {k} {by_position[k].value[:80]!r} ({expected.dead_letter[k]})" for k in missing[:5]]
    found += [f"dead-lettered but well-formed: {k} as {dead[k]}" for k in extra[:5]]
    found += [f"dead-lettered as {got}, the oracle says {want}: {k}" for k, got, want in wrong[:5]]

    state = {r.key: r for r in rows(spark, tables.state)}
    for key in sorted(set(state) | set(expected.state)):
        want, got = expected.state.get(key), state.get(key)
        if want is None or got is None:
            found.append(f"state of key {key[:40]!r}: {'not expected' if want is None else 'missing'}")
            continue
        if got.event_count != want.event_count or not close(got.amount_sum, want.amount_sum, want.amount_abs) \
                or (got.amount_min, got.amount_max) != (want.amount_min, want.amount_max) \
                or (got.last_event_time, got.last_amount) != (want.last[2], want.last[3]):
            found.append(f"state of key {key[:40]!r}: count {got.event_count} sum {got.amount_sum} min "
                         f"{got.amount_min} max {got.amount_max} last {got.last_event_time}, the oracle says count "
                         f"{want.event_count} sum {want.amount_sum} min {want.amount_min} max {want.amount_max} "
                         f"last {want.last[2]}")

    final = {(r.key, r.window_start): r for r in rows(spark, tables.windows)}
    open_ = {(r.key, r.window_start): r for r in rows(spark, tables.window_state)}
    found += [f"window {k} both final and open" for k in sorted(set(final) & set(open_))][:5]
    late_rows = rows(spark, tables.late)
    late_count = Counter((r.kafka_partition, r.kafka_offset) for r in late_rows)
    found += [f"late {n} times: {k}" for k, n in late_count.items() if n > 1][:5]
    counted: dict = {}
    for k, r in {**open_, **final}.items():
        counted[k] = [r.event_count, r.amount_sum]
    newest = expected.newest
    for position in late_count:
        record = by_position.get(position)
        reason, event = oracle.classify(record.value) if record else ("no such record", None)
        if event is None:
            found.append(f"late but not well-formed: {position} ({reason})")
            continue
        if oracle.window_end(event.event_time) > newest - oracle.LATENESS:
            found.append(f"late though its window ends after the newest event time less the lateness: {position}")
        c = counted.setdefault((event.key, oracle.window_start(event.event_time)), [0, 0.0])
        c[0] += 1
        c[1] += event.amount
    for k in sorted(set(counted) | set(expected.windows)):
        want, got = expected.windows.get(k), counted.get(k, [0, 0.0])
        if want is None or got[0] != want.event_count or not close(got[1], want.amount_sum, want.amount_abs):
            found.append(f"window {k}: windows + late hold {got[0]} records (sum {got[1]}), the oracle "
                         f"{want.event_count if want else 0}")
    found += updates_topic_differences(spark, world.bootstrap, tables)[1]
    found += secret_sightings(world)
    return found[:40]
