"""The handoff log's lifecycle: an append that breaks it is refused in one line and leaves the log as it was; the
ways the commands really go (a crash and a restart, a rebase requested while live, a fresh backfill) pass."""

from __future__ import annotations

from datetime import datetime

import pytest

from switchyard.state_handoff.control import details, handoff_log, lifecycle
from switchyard.state_handoff.control.details import BackfillCommitted
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import LifecycleError, Phase, Status
from switchyard.state_handoff.tables import Tables


@pytest.fixture
def tables(tmp_path) -> Tables:
    return Tables(str(tmp_path), "demo")


def _append_all(tables: Tables, handoff_id: str, *statuses: Status) -> list[LogEntry]:
    return [handoff_log.append(tables, handoff_id, status) for status in statuses]


def _refused(tables: Tables, handoff_id: str, status: Status) -> str:
    before = handoff_log.entries(tables)
    with pytest.raises(LifecycleError) as refused:
        handoff_log.append(tables, handoff_id, status)
    assert handoff_log.entries(tables) == before, "a refused append writes nothing"
    message = str(refused.value)
    assert "\n" not in message and message.startswith("handoff log of pipeline demo: ")
    assert f"{status} refused for handoff {handoff_id}" in message
    return message


def test_an_append_that_breaks_the_lifecycle_is_refused_in_one_line(tables):
    _append_all(tables, "h1", Status.BACKFILL_STARTED)
    message = _refused(tables, "h1", Status.SWITCHED)
    assert message.endswith("its latest status is BACKFILL_STARTED, which only BACKFILL_COMMITTED, FAILED may "
                            "follow")
    assert "its first must be one of BACKFILL_STARTED, BACKFILL_COMMITTED, FAILED" in \
        _refused(tables, "h2", Status.STREAM_STARTED)
    assert "needs an earlier HANDOFF_COMMITTED" in _refused(tables, "h1", Status.REBASE_REQUESTED)
    assert "latest status is BACKFILL_STARTED" in _refused(tables, "h1", Status.HANDOFF_COMMITTED)

    _append_all(tables, "h1", Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED)
    assert "needs an earlier SWITCHED of the same handoff" in _refused(tables, "h1", Status.CAUGHT_UP)
    _append_all(tables, "h1", Status.SWITCHED)
    assert "latest status is SWITCHED" in _refused(tables, "h1", Status.FALLING_BEHIND)
    assert "latest status is SWITCHED" in _refused(tables, "h1", Status.SWITCHED)
    assert "latest status is SWITCHED" in _refused(tables, "h1", Status.HANDOFF_COMMITTED)
    _append_all(tables, "h1", Status.PAUSED)
    assert "latest status is PAUSED, which only FAILED, RECONCILIATION_FAILED, REBASE_ABANDONED may follow" in \
        _refused(tables, "h1", Status.STREAM_STARTED)
    assert [e.status for e in handoff_log.entries(tables)] == [
        Status.BACKFILL_STARTED, Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED,
        Status.SWITCHED, Status.PAUSED]


def test_crashes_restarts_and_a_rebase_cycle_pass(tables):
    """Each line is a way the commands go: `backfill`, `handoff`, `stream` killed and restarted, `rebase` from the
    command line while the stream is live, the new handoff at the cut streamed, stopped, failed and restarted."""
    S = Status
    ways = [
        ("h1", S.BACKFILL_STARTED, S.BACKFILL_COMMITTED, S.HANDOFF_COMMITTED),
        ("h1", S.STREAM_STARTED, S.STREAM_STARTED),  # SIGKILL before SWITCHED, then a restart
        ("h1", S.SWITCHED, S.CAUGHT_UP, S.FALLING_BEHIND, S.CAUGHT_UP),
        ("h1", S.STREAM_STARTED, S.CAUGHT_UP),  # a restart after SWITCHED: no second SWITCHED
        ("h1", S.REBASE_REQUESTED, S.FALLING_BEHIND),  # `rebase` while live; the monitor reads it a moment later
        ("h1", S.REBASE_REQUESTED, S.PAUSED),
        ("h2", S.BACKFILL_STARTED),  # the rebase's tiles run, killed: the restart tiles again, under a new id
        ("h3", S.BACKFILL_STARTED, S.BACKFILL_COMMITTED, S.HANDOFF_COMMITTED),
        ("h3", S.STREAM_STARTED, S.SWITCHED, S.STOPPED, S.STREAM_STARTED, S.FAILED),
        ("h3", S.REBASE_REQUESTED, S.PAUSED, S.FAILED),  # the rebase of a failed stream failed too
        ("h3", S.STREAM_STARTED, S.CAUGHT_UP, S.STOPPED, S.REBASE_REQUESTED, S.PAUSED),
        ("h4", S.BACKFILL_COMMITTED, S.HANDOFF_COMMITTED, S.PAUSED),  # a rebase with no days to tile, no stream
        ("h3", S.FAILED, S.REBASE_ABANDONED, S.STREAM_STARTED, S.CAUGHT_UP),  # its rebase given up: h3 resumes
        ("h3", S.REBASE_REQUESTED, S.REBASE_REFUSED, S.FALLING_BEHIND),  # refused before its pause: streams on
        ("h5", S.FAILED),  # the state commit of a fresh id failed
        ("h6", S.BACKFILL_STARTED, S.FAILED),
    ]
    appended = [entry for handoff_id, *statuses in ways for entry in _append_all(tables, handoff_id, *statuses)]
    assert handoff_log.entries(tables) == appended


def test_statuses_keep_their_string_names_and_entries_their_attributes(tables):
    assert Status("SWITCHED") is Status.SWITCHED and Status.SWITCHED == "SWITCHED"
    assert set(Status) == set(lifecycle.TRANSITIONS) - {None} | lifecycle.ASIDES
    entry = handoff_log.append(tables, "h1", "BACKFILL_COMMITTED", state_version=4, start_offsets={0: 7},
                               backlog_watermark=datetime(2026, 1, 2, 3, 4, 5), details=BackfillCommitted(keys=2))
    assert entry.status is Status.BACKFILL_COMMITTED and entry.backlog_watermark == datetime(2026, 1, 2, 3, 4, 5)
    assert handoff_log.offsets(entry) == {0: 7} and details.of(entry) == BackfillCommitted(keys=2)
    assert entry.details == '{"keys": 2}'
    assert list(vars(entry)) == ["seq", "handoff_id", "pipeline", "status", "at", "state_version", "start_offsets",
                                 "backlog_watermark", "details"]
    assert LogEntry.from_payload(entry.as_payload()) == entry == handoff_log.entries(tables)[0]


@pytest.mark.parametrize(("latest", "alive", "phase"), [
    (None, False, Phase.NOT_STARTED), (Status.BACKFILL_COMMITTED, False, Phase.BACKLOG),
    (Status.STREAM_STARTED, True, Phase.SWITCHING), (Status.SWITCHED, True, Phase.STREAMING),
    (Status.CAUGHT_UP, False, Phase.GONE), (Status.STOPPED, False, Phase.STOPPED),
    (Status.REBASE_REQUESTED, False, Phase.REBASE_REQUESTED), (Status.PAUSED, True, Phase.REBASING),
    ("FAILED", False, Phase.FAILED)])
def test_the_phase_of_a_pipeline(latest, alive, phase):
    assert lifecycle.phase(latest, alive) is phase
    assert str(phase) == lifecycle.phase(latest, alive)  # `status` prints the phase's text


def test_every_status_is_reachable_and_only_a_failure_or_an_abandon_follows_a_pause():
    reachable, frontier = set(), {None}
    while frontier:
        reachable |= (found := set().union(*(lifecycle.TRANSITIONS[s] for s in frontier)) - reachable)
        frontier = found
    assert reachable | lifecycle.ASIDES == set(Status)
    assert lifecycle.TRANSITIONS[Status.PAUSED] == {Status.FAILED, Status.RECONCILIATION_FAILED,
                                                    Status.REBASE_ABANDONED}
    assert all(Status.FAILED in allowed for allowed in lifecycle.TRANSITIONS.values())


def test_a_handoff_goes_live_when_switched_or_restarted_after_switching(tables):
    _append_all(tables, "h1", Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED)
    assert not lifecycle.has_switched(handoff_log.entries(tables), "h1")
    assert not lifecycle.goes_live(Status.STREAM_STARTED, switched_before=False)
    assert lifecycle.goes_live(Status.SWITCHED, switched_before=False)
    _append_all(tables, "h1", Status.SWITCHED, Status.STOPPED)
    assert lifecycle.has_switched(handoff_log.entries(tables), "h1")
    assert not lifecycle.has_switched(handoff_log.entries(tables), "h2")
    assert lifecycle.goes_live("STREAM_STARTED", switched_before=True)
    assert not lifecycle.goes_live(Status.CAUGHT_UP, switched_before=True)
