"""The control plane's decisions as plain functions of the handoff log they are given, without Spark, a table or a
clock of the machine's: which rebase request is open (and with which pause), which stop request is for which
stream, and which `state` versions a vacuum keeps."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.ledger import Ledger
from switchyard.state_handoff.control.lifecycle import Status

T0 = datetime(2026, 1, 1)


class Log:
    """A handoff log written entry by entry, as the processes would."""

    def __init__(self):
        self.entries: list[LogEntry] = []

    def add(self, status: Status, handoff: str = "h1", state_version: int | None = None, **details) -> Log:
        seq = len(self.entries)
        self.entries.append(LogEntry(seq=seq, handoff_id=handoff, pipeline="demo", status=status,
                                     at=T0 + timedelta(seconds=seq), state_version=state_version,
                                     start_offsets=None, backlog_watermark=None,
                                     details=json.dumps(details) if details else None))
        return self


def _open(log: Log) -> str | None:
    request = Ledger.of(log.entries).open_rebase
    return None if request is None else request.request_id


def paused_state_versions(entries) -> dict[str, int]:
    return Ledger.of(entries).paused_state_versions


def stop_requested(entries, lease_id: str):
    return Ledger.of(entries).stop_for(lease_id)


def test_a_rebase_request_stays_open_until_the_handoff_at_its_cut_answers_it():
    log = Log().add(Status.HANDOFF_COMMITTED, state_version=3).add(Status.SWITCHED)
    assert _open(log) is None
    log.add(Status.REBASE_REQUESTED, request_id="r1", reason="rebase")
    assert _open(log) == "r1"
    log.add(Status.PAUSED, request_id="r1", cut={"state_version": 7})
    request = Ledger.of(log.entries).open_rebase
    assert request.request_id == "r1" and request.paused.as_details()["state_version"] == 7
    log.add(Status.HANDOFF_COMMITTED, handoff="h2", state_version=8, request_id="r1")
    assert _open(log) is None


def test_the_oldest_open_request_comes_first():
    log = Log().add(Status.HANDOFF_COMMITTED).add(Status.REBASE_REQUESTED, request_id="r1") \
        .add(Status.REBASE_REQUESTED, request_id="r2")
    assert _open(log) == "r1"
    log.add(Status.REBASE_REFUSED, request_id="r1", reason="the archive does not cover the cut")
    assert _open(log) == "r2"


def test_a_failure_answers_a_request_only_before_its_pause():
    before = Log().add(Status.HANDOFF_COMMITTED).add(Status.REBASE_REQUESTED, request_id="r1") \
        .add(Status.FAILED, request_id="r1", reason="the backfill failed")
    assert _open(before) is None, "nothing was paused: the stream goes on"
    after = Log().add(Status.HANDOFF_COMMITTED).add(Status.REBASE_REQUESTED, request_id="r1") \
        .add(Status.PAUSED, request_id="r1", cut={}).add(Status.FAILED, request_id="r1", reason="crash")
    assert _open(after) == "r1", "paused: only the handoff at the cut (or an abandon) ends it"
    after.add(Status.REBASE_ABANDONED, request_id="r1")
    assert _open(after) is None


def test_a_resumable_reconciliation_failure_answers_its_request():
    log = Log().add(Status.HANDOFF_COMMITTED).add(Status.REBASE_REQUESTED, request_id="r1") \
        .add(Status.PAUSED, request_id="r1", cut={}) \
        .add(Status.RECONCILIATION_FAILED, request_id="r1", resumable=False)
    assert _open(log) == "r1", "not resumable: still open"
    log.add(Status.RECONCILIATION_FAILED, request_id="r1", resumable=True)
    assert _open(log) is None


def test_a_stop_request_is_for_the_stream_holding_its_lease_only():
    log = Log().add(Status.HANDOFF_COMMITTED).add(Status.STREAM_STARTED) \
        .add(Status.STOP_REQUESTED, lease_id="lease-a", requested_by="switchyard stop")
    assert stop_requested(log.entries, "lease-a").requested_by == "switchyard stop"
    assert stop_requested(log.entries, "lease-b") is None, "a later stream is not stopped by an earlier request"


def test_a_paused_state_version_is_kept_until_a_stream_serves_a_state_past_its_cut():
    log = Log().add(Status.HANDOFF_COMMITTED, state_version=3).add(Status.SWITCHED) \
        .add(Status.REBASE_REQUESTED, request_id="r1").add(Status.PAUSED, request_id="r1", cut={"state_version": 9})
    assert paused_state_versions(log.entries) == {"r1": 9}
    log.add(Status.HANDOFF_COMMITTED, handoff="h2", state_version=10, request_id="r1")
    assert paused_state_versions(log.entries) == {"r1": 9}, "its stream may not have taken over yet"
    log.add(Status.SWITCHED, handoff="h2")
    assert paused_state_versions(log.entries) == {}


def test_a_paused_version_is_released_when_its_request_ends_without_a_replacement():
    for ending in (dict(status=Status.REBASE_ABANDONED), dict(status=Status.RECONCILIATION_FAILED, resumable=True)):
        log = Log().add(Status.HANDOFF_COMMITTED, state_version=3) \
            .add(Status.REBASE_REQUESTED, request_id="r1").add(Status.PAUSED, request_id="r1", cut={"state_version": 5})
        status = ending.pop("status")
        log.add(status, request_id="r1", **ending)
        assert paused_state_versions(log.entries) == {}, status


def test_every_request_is_written_and_read_one_way(tmp_path):
    """A request of each kind through the real log (delta-rs): its id, who asked and from where, its own fields."""
    import os
    import socket

    from switchyard.state_handoff.control import handoff_log, requests
    from switchyard.state_handoff.tables import Tables

    tables = Tables(str(tmp_path), "demo")
    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED):
        handoff_log.append(tables, "h1", status)
    asked = [requests.ask(tables, requests.RebaseRequest(handoff_id="h1", requested_by="switchyard rebase",
                                                         reason="backfill", days=(None, "2026-01-02"))),
             requests.ask(tables, requests.StopRequest(handoff_id="h1", requested_by="switchyard stop",
                                                       lease_id="lease-a")),
             requests.ask(tables, requests.StartRequest(handoff_id="h1", requested_by="switchyard start"))]
    read = [requests.read(e) for e in handoff_log.entries(tables)[2:]]
    assert read == asked
    assert {(r.host, r.pid) for r in read} == {(socket.gethostname(), os.getpid())}
    assert len({r.request_id for r in read}) == 3
    assert (read[0].reason, read[0].days) == ("backfill", (None, "2026-01-02")) and read[1].lease_id == "lease-a"
    assert requests.read(handoff_log.entries(tables)[0]) is None, "a backfill's commit is no request"
    assert [r.KIND for r in Ledger.of(handoff_log.entries(tables)).stops] == [Status.STOP_REQUESTED]
    assert Ledger.of(handoff_log.entries(tables)).open_rebase.request_id == asked[0].request_id
