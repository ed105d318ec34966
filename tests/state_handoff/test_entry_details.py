"""The typed details of the handoff log's entries, through a real log (delta-rs, no Spark): each class comes back as
it was written, under the JSON names its writers always wrote; keys a writer left out read as None, a key no class
names is refused; and an entry's details must be its status's class."""

from __future__ import annotations

import json
from dataclasses import fields

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.details import (BackfillCommitted, BackfillStarted, Failed, HandoffCommitted, Lag,
                                                      Paused, RebaseAbandoned, RebaseRefused, ReconciliationFailed,
                                                      StreamStarted, Stopped, Switched)
from switchyard.state_handoff.control.lifecycle import REQUESTS, Status
from switchyard.state_handoff.tables import Tables

CUT = {"offsets": {"0": 12, "1": 9}, "keyed": {"0": 10, "1": 9}, "events": {"0": 11, "1": 9}, "state_version": 4}
RECONCILIATION = {"keys_recomputed": 3, "keys_different": 1, "examples": [{"key": "k1", "column": "n"}]}

# One handoff's way through every status that carries details, each with details as its writer makes them (JSON
# shapes: per-partition maps keyed by strings, as they read back).
WAY = [
    (Status.BACKFILL_STARTED, BackfillStarted(from_="2026-01-01", to="2026-01-03", strategy="sort")),
    (Status.BACKFILL_COMMITTED, BackfillCommitted(
        from_="2026-01-01", to="2026-01-03", boundary={"0": 11, "1": 8}, records_read=21, well_formed=20,
        dead_lettered=1, keys=3, accounting={"0": {"read": 12, "well_formed": 11, "dead_lettered": 1}},
        archive_accounting={"0": {"read": 12, "well_formed": 11, "dead_lettered": 1}}, complete=False,
        records_not_backfilled={"1": 2}, unreadable_files=["a.parquet"], skipped_files=[],
        gaps=[{"file": "a.parquet", "partition": 1, "from": 3, "to": 4, "records": 2, "below_boundary": True}],
        tiled_files=[], duration_s=1.5, tiles_s={"check": 0.1}, commit_s={"state": 0.4},
        backlog={"table": "state", "version": 2, "tiles_version": 1, "columns": ["k", "n"]},
        definition={"version": "abc", "parts": {"key": "def"}}, kafka_tail={"topic": "t", "records": 0},
        at_cut={"request_id": "r1", "cut": {"0": 12}, "reconciliation": RECONCILIATION}, mode="streaming-only",
        restarted_from="h0", lost={"0": {"from": 0, "to": 2, "records": 2}})),
    (Status.HANDOFF_COMMITTED, HandoffCommitted(
        topic="events", boundary_mode="time", boundary={"0": 11}, retained={"0": [0, 12]},
        definition={"version": "abc", "parts": {}}, at="2026-01-03T09:30:00", overlap_since="2026-01-03T09:25:00",
        overlap_until="2026-01-03T09:31:00", overlap="/w/demo/stream/h1/overlap", overlap_identities=4,
        identity="event_id", request_id="r1", previous_handoff="h0", reconciliation=RECONCILIATION, rebase_s=2.5,
        restarted_from="h0", lost={"0": {"from": 0, "to": 2, "records": 2}})),
    (Status.STREAM_STARTED, StreamStarted(pid=4242, restart=False, topic="events", spark_version="4.0.1",
                                          updates_topic="demo.updates.abc", updates_from={"0": 0},
                                          added_partitions={"2": 0})),
    (Status.SWITCHED, Switched(seconds_since_start=3.25, startup_s={"seed": 1.0}, seconds_since_process_start=9.5,
                               keyed_incarnation="0f3c", request_id="r1")),
    (Status.CAUGHT_UP, Lag(offsets_behind={"0": 0, "1": 1}, latest_offsets={"0": 12, "1": 9}, input_rows_per_s=5.0,
                           processed_rows_per_s=7.5, last_batch_ms=120, stream_watermark="2026-01-03T09:29:00",
                           batch_id=7, update_batch_ms=80, state_updates_behind=0)),
    (Status.FALLING_BEHIND, Lag(offsets_behind={"0": 5000}, latest_offsets={"0": 6000}, batch_id=8)),
    (Status.STOPPED, Stopped(reason="SIGTERM", offsets_behind={"0": 0})),
    (Status.REBASE_REFUSED, RebaseRefused(request_id="r0", reason="the archive is being written")),
    (Status.PAUSED, Paused(request_id="r1", reason="backfill", cut=CUT)),
    (Status.RECONCILIATION_FAILED, ReconciliationFailed(request_id="r1", reason="1 of 3 keys differ", resumable=True,
                                                        reconciliation=RECONCILIATION)),
    (Status.FAILED, Failed(phase="rebase", reason="the archive is gone", request_id="r1")),
    (Status.REBASE_ABANDONED, RebaseAbandoned(request_id="r1", reason="abandoned by ops", cut=CUT)),
]


@pytest.fixture
def tables(tmp_path) -> Tables:
    return Tables(str(tmp_path), "demo")


def _write_raw(tables: Tables, handoff_id: str, status: Status, recorded: dict) -> None:
    """A row with the details a writer of dicts made, appended as the log's next commit (no check of its keys)."""
    seq = DeltaTable(tables.handoffs).version() + 1
    row = {"seq": seq, "handoff_id": handoff_id, "pipeline": tables.pipeline, "status": str(status),
           "at": handoff_log.utc_now(), "state_version": None, "start_offsets": None, "backlog_watermark": None,
           "details": json.dumps(recorded)}
    write_deltalake(tables.handoffs, pa.Table.from_pylist([row], handoff_log.SCHEMA), mode="append")


def test_every_status_with_details_has_one_class_and_requests_have_none():
    assert set(details.CLASSES) == set(Status) - REQUESTS
    assert {details.CLASSES[status] for status, _ in WAY} == set(details.CLASSES.values())
    assert details.CLASSES[Status.CAUGHT_UP] is details.CLASSES[Status.FALLING_BEHIND] is Lag


def test_each_class_comes_back_from_the_log_as_it_was_written(tables):
    written = [handoff_log.append(tables, "h1", status, details=logged) for status, logged in WAY]
    read = handoff_log.entries(tables)
    assert [e.seq for e in read] == [e.seq for e in written]
    for entry, (status, logged) in zip(read, WAY):
        assert entry.status == status
        assert details.of(entry) == logged, status


def test_every_field_round_trips_under_its_json_name(tables):
    """Each field, set to a value of its own, is stored under its JSON name and read back into the same field."""
    every = [(status, type(logged)(**{f.name: f"{type(logged).__name__}.{f.name}" for f in _named(type(logged))}))
             for status, logged in WAY]
    for status, logged in every:
        handoff_log.append(tables, "h1", status, details=logged)
    for entry, (status, logged) in zip(handoff_log.entries(tables), every):
        assert details.of(entry) == logged, status
        stored = json.loads(entry.details)
        assert stored == {f.name.removesuffix("_"): getattr(logged, f.name) for f in _named(type(logged))}, status


def _named(cls) -> list:
    return list(fields(cls))


def test_the_json_keys_are_the_ones_writers_wrote_before_the_types():
    assert BackfillStarted(from_="2026-01-01", to="2026-01-02", strategy="hash").as_details() == {
        "from": "2026-01-01", "to": "2026-01-02", "strategy": "hash"}
    assert Switched(seconds_since_start=1.0, startup_s={}, seconds_since_process_start=None,
                    keyed_incarnation="x").as_details() == {"seconds_since_start": 1.0, "startup_s": {},
                                                            "keyed_incarnation": "x"}, "a None is left out"
    assert HandoffCommitted(topic="t", boundary_mode="offsets", boundary={}).as_details() == {
        "topic": "t", "boundary_mode": "offsets", "boundary": {}}, "empty values are written: only None is left out"


def test_keys_a_writer_left_out_read_as_none_and_a_key_no_class_names_is_refused(tables):
    handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)
    _write_raw(tables, "h1", Status.BACKFILL_COMMITTED, {"from": "2026-01-01", "keys": 2})
    _write_raw(tables, "h1", Status.HANDOFF_COMMITTED, {"topic": "events", "boundary": {"0": 4}})
    _write_raw(tables, "h1", Status.STREAM_STARTED, {"pid": 7, "restart": None, "engine": "x"})
    _write_raw(tables, "h1", Status.FAILED, {})
    backfill, handoff, started, failed = handoff_log.entries(tables)[1:]

    assert details.of(backfill) == BackfillCommitted(from_="2026-01-01", keys=2)
    assert details.of(backfill).complete is None and details.of(backfill).at_cut is None
    assert details.of(handoff) == HandoffCommitted(topic="events", boundary={"0": 4})
    assert details.of(handoff).request_id is None and details.of(handoff).reconciliation is None
    assert details.of(failed) == Failed()
    with pytest.raises(TypeError, match="engine"):
        details.of(started)


def test_a_request_has_no_details_class_and_the_helpers_read_it_as_its_protocol_does(tables):
    handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED, details=BackfillCommitted(keys=0))
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, details=HandoffCommitted(topic="events"))
    asked = requests.ask(tables, requests.RebaseRequest(handoff_id="h1", requested_by="test", reason="backfill"))
    paused = handoff_log.append(tables, "h1", Status.PAUSED, details=Paused(request_id=asked.request_id,
                                                                            reason="backfill", cut=CUT))
    request = handoff_log.entries(tables)[-2]
    assert details.of(request) is None and requests.read(request) == asked
    assert details.request_id(request) == details.request_id(paused) == asked.request_id
    assert details.reason(request) == details.reason(paused) == "backfill"
    committed = handoff_log.entries(tables)[1]
    assert details.request_id(committed) is None and details.reason(committed) is None


@pytest.mark.parametrize("status, logged", [
    (Status.SWITCHED, Paused(request_id="r1")),
    (Status.FALLING_BEHIND, Stopped(reason="SIGTERM")),
    (Status.CAUGHT_UP, Switched()),
    (Status.REBASE_REQUESTED, RebaseRefused(request_id="r1")),
])
def test_details_of_another_status_are_refused_and_nothing_is_written(tables, status, logged):
    handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED)
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, details=HandoffCommitted(topic="events"))
    before = handoff_log.entries(tables)
    with pytest.raises(TypeError, match=f"{type(logged).__name__} details are not {status}'s"):
        handoff_log.append(tables, "h1", status, details=logged)
    assert handoff_log.entries(tables) == before


def test_a_dict_is_refused_but_for_a_request(tables):
    handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED)
    with pytest.raises(TypeError, match="HANDOFF_COMMITTED's details are written as its class"):
        handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, details={"topic": "events"})
    handoff_log.append(tables, "h1", Status.HANDOFF_COMMITTED, details=HandoffCommitted(topic="events"))
    stop = handoff_log.append(tables, "h1", Status.STOP_REQUESTED, details={"request_id": "s1", "lease_id": "l1"})
    assert requests.read(stop).lease_id == "l1"
