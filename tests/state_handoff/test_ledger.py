"""The control plane's typed requests, the ledger over them and the one wait for an answer: requests written and
read back through the real log (delta-rs), the ledger's rules fed entry by entry, and `await_answer` over a clock the
test advances (no sleeping)."""

from __future__ import annotations

import pytest

from switchyard.state_handoff.clock import ManualClock
from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.answers import NoAnswer, await_answer
from switchyard.state_handoff.control.details import HandoffCommitted, Paused, ReconciliationFailed
from switchyard.state_handoff.control.ledger import Ledger
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.requests import Cut, RebaseRequest, RedeployPlan
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.tables import Tables

CUT = Cut({0: 10, 1: 12}, {0: 8, 1: 12}, {0: 9, 1: 11}, state_version=4)


@pytest.fixture
def tables(tmp_path) -> Tables:
    tables = Tables(str(tmp_path), "demo")
    handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED)
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, start_offsets={0: 0, 1: 0},
                       details=HandoffCommitted(topic="events"))
    return tables


def test_a_rebase_request_reads_back_typed_with_its_plan_its_figures_and_its_pause(tables):
    plan = RedeployPlan("v2", {"version": "v1", "keys": ["key"]}, tiles_version=3, dead_letter_version=None,
                        beside={"version": "v2", "files": ["a.parquet"]})
    asked = requests.request_rebase(PipelineView.read(tables), "test", "redeploy", days=("2026-01-01", None),
                                    figures={"behind": 1500}, accept_differences=True, redeploy=plan)
    read = requests.read(handoff_log.entries(tables)[-1])
    assert read == asked and isinstance(read, RebaseRequest) and read.paused is None
    assert (read.redeploy, read.figures, read.days, read.accept_differences) == (
        plan, {"behind": 1500}, ("2026-01-01", None), True)
    assert requests.as_details(read)["redeploy"]["beside"] == {"version": "v2", "files": ["a.parquet"]}
    handoff_log.append(tables, "h1", Status.PAUSED, details=Paused(request_id=asked.request_id, reason="redeploy",
                                                                   cut=CUT.as_details()))
    opened = PipelineView.read(tables).ledger.open_rebase
    assert opened.request_id == asked.request_id and opened.paused == CUT, "the ledger fills the pause in"
    assert opened.accepting(False).accept_differences, "a rerun's flag adds to the recorded one, never removes it"


def test_a_resumable_reconciliation_failure_closes_a_redeploy_but_keeps_the_tiles_it_replaced(tables):
    """Stated on purpose in the ledger: the request is no longer open (the stream streams on), but its tiles may
    still hold `tiles` until `rebase --abandon` restores the version they replaced, so a vacuum keeps that version."""
    asked = requests.request_rebase(PipelineView.read(tables), "test", "redeploy",
                                    redeploy=RedeployPlan("v2", {"version": "v1"}, tiles_version=7))
    handoff_log.append(tables, "h1", Status.PAUSED, details=Paused(request_id=asked.request_id, cut=CUT.as_details()))
    handoff_log.append(tables, "h1", Status.RECONCILIATION_FAILED,
                       details=ReconciliationFailed(request_id=asked.request_id, resumable=True))
    ledger = PipelineView.read(tables).ledger
    assert ledger.open_rebase is None
    assert ledger.open_redeploy_tiles_versions == {7}
    assert ledger.paused_state_versions == {}, "nothing replaced: the paused state version is let go"


def test_await_answer_polls_a_fresh_view_until_an_answer_and_gives_up_on_its_clock():
    clock, looks = ManualClock(), []

    def look():
        looks.append(clock.monotonic())
        return len(looks)

    assert await_answer(look, lambda n: "stopped" if n == 4 else None, timeout_s=10, clock=clock) == "stopped"
    assert looks == [0.0, 1.0, 2.0, 3.0], "a fresh look each poll, the clock advanced by the wait, not by sleeping"
    with pytest.raises(NoAnswer, match="within 5s"):
        await_answer(look, lambda n: None, timeout_s=5, clock=clock)
    assert clock.monotonic() == 3.0 + 5.0, "given up at the deadline, no wait past it"

    def refuse(n):
        raise UserError("refused")

    with pytest.raises(UserError, match="refused"):
        await_answer(look, refuse, timeout_s=5, clock=clock)


def test_every_request_kind_has_one_class_and_reads_back_as_written(tables):
    for asked in (requests.StopRequest(handoff_id="h1", requested_by="switchyard stop", lease_id="l1"),
                  requests.StartRequest(handoff_id="h1", requested_by="switchyard start"),
                  requests.PreviousDropped(handoff_id="h1", requested_by="test", redeploy_request="r1",
                                           tiles_version=2)):
        written = requests.ask(tables, asked)
        assert type(written) is type(asked) and written.request_id and written.seq >= 0
        assert requests.read(handoff_log.entries(tables)[-1]) == written
    ledger = Ledger.of(handoff_log.entries(tables))
    assert ledger.stop_for("l1").requested_by == "switchyard stop" and ledger.stop_for("l2") is None
    assert ledger.newest_seq(requests.StartRequest) > ledger.newest_seq(requests.StopRequest)


def test_a_paused_rebase_that_keeps_failing_is_refused_until_an_operator_starts_it_again(tables):
    """Each failure after the pause is counted; at PAUSED_FAILURES a stream stops retrying it by itself (exit 2:
    `serve` holds the stream down and alerts); a start request counts anew. A failure before any pause is no such
    failure."""
    from switchyard.jobs.rebase.requests import PAUSED_FAILURES, refuse_if_failing
    from switchyard.state_handoff.control.details import Failed

    asked = requests.request_rebase(PipelineView.read(tables), "test", "switch back")
    handoff_log.append(tables, "h1", Status.PAUSED, details=Paused(request_id=asked.request_id, cut=CUT.as_details()))
    for _ in range(PAUSED_FAILURES - 1):
        handoff_log.append(tables, "h1", Status.FAILED, details=Failed(phase="rebase", request_id=asked.request_id))
    view = PipelineView.read(tables)
    refuse_if_failing(view, view.ledger.open_rebase)  # not yet
    handoff_log.append(tables, "h1", Status.FAILED, details=Failed(phase="rebase", request_id=asked.request_id))
    view = PipelineView.read(tables)
    assert view.ledger.failures_after_pause(view.ledger.open_rebase) == PAUSED_FAILURES
    with pytest.raises(UserError, match=f"failed {PAUSED_FAILURES} times at its cut.*`switchyard start`"):
        refuse_if_failing(view, view.ledger.open_rebase)
    requests.ask(tables, requests.StartRequest(handoff_id="h1", requested_by="switchyard start"))
    view = PipelineView.read(tables)
    refuse_if_failing(view, view.ledger.open_rebase)  # an operator's start: counted anew
    assert view.ledger.open_rebase.request_id == asked.request_id, "still open: the cut is the way on"


def test_a_paused_rebase_out_of_reach_of_kafka_for_the_moment_is_not_now_and_never_counted(tables, monkeypatch):
    """A paused rebase that meets Kafka (or the registry) out of reach exits not now (75: `serve` retries it with its
    backoff) and records a FAILED that the bound on a paused rebase's failures does not count, so an outage that
    outlasts three attempts does not hold the stream down."""
    from switchyard.jobs.rebase import run
    from switchyard.jobs.rebase.requests import PAUSED_FAILURES, refuse_if_failing
    from switchyard.state_handoff.errors import NotNow
    from switchyard.state_handoff.language.pipelines import get_pipeline

    asked = requests.request_rebase(PipelineView.read(tables), "test", "switch back")
    handoff_log.append(tables, "h1", Status.PAUSED, details=Paused(request_id=asked.request_id, cut=CUT.as_details()))

    def kafka_away(*_args, **_kwargs):
        raise NotNow("Kafka at 127.0.0.1:9 did not answer within 10 s: start it, or check --bootstrap")

    monkeypatch.setattr(run, "rebase_at_cut", kafka_away)
    for _ in range(PAUSED_FAILURES + 1):
        view = PipelineView.read(tables)
        with pytest.raises(NotNow, match="did not answer.*the rebase stays paused at its cut"):
            run.run_rebase(None, get_pipeline("demo"), tables, "127.0.0.1:9", view.current_handoff,
                           view.ledger.open_rebase)
    view = PipelineView.read(tables)
    failed = [e for e in handoff_log.entries(tables) if e.status == Status.FAILED]
    assert len(failed) == PAUSED_FAILURES + 1 and all(details.of(e).not_now for e in failed)
    assert view.ledger.failures_after_pause(view.ledger.open_rebase) == 0
    refuse_if_failing(view, view.ledger.open_rebase)  # still retried by itself
