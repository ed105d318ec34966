"""The backlog phase against the plain-Python oracle: generate, archive 80%, backfill, compare everything."""

from __future__ import annotations

import json
import os
import re
import shutil
from datetime import timedelta

import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import TAIL_PHASE, commit_backfill, run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_upkeep
from switchyard.state_handoff.io.kafka_io import offset_bounds, produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, close
from tests.support.compare import rows as _rows

PIPELINE = get_pipeline("demo")
PARTITIONS = 3


def _edge_records(partitions: int) -> list[tuple]:
    """Hand-made records the generator may not hit: awkward keys, extreme amounts, duplicate ids, bad values."""
    def ev(key, eid, t, amount):
        body = json.dumps({"event_id": eid, "key": key, "event_time": t, "amount": amount, "kind": "edge"},
                          ensure_ascii=False)
        return key.encode(), body.encode(), None, None

    good = [
        ev("ключ 🔑 ü", "edge-1", "2026-01-02T10:00:00Z", 1.5),
        ev('quote"comma,tab\tspace ', "edge-2", "2026-01-02T10:05:00.250+00:00", -7.25),
        ev('quote"comma,tab\tspace ', "edge-3", "2026-01-02T12:05:00+01:00", 1e15),
        ev("huge", "edge-4", "2026-01-02T10:00:00Z", 123456789012345678),
        ev("huge", "edge-4", "2026-01-02T10:00:00Z", -1e15),  # same event_id and time: distinct inputs
        ev("neg", "edge-5", "2026-01-02T10:00:00Z", -0.01),
    ]
    bad = [(b"k", v, None, None) for v in (
        None, b"", b"[]", b"42", b'"text"', b"null", b"\xff\xfe\x00garbage", b'{"key": "a",',
        b'{"key": "", "event_time": "2026-01-02T10:00:00Z", "amount": 1}',
        b'{"event_time": "2026-01-02T10:00:00Z", "amount": 1}',
        b'{"key": "k", "event_time": "2026-01-02 10:00:00", "amount": 1}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00", "amount": 1}',
        b'{"key": "k", "event_time": 1767348000, "amount": 1}',
        b'{"key": "k", "event_time": "2026-02-30T00:00:00Z", "amount": 1}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": "12.5"}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": NaN}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": -Infinity}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": 1e400}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": null}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z", "amount": [1]}',
        b'{"key": "k", "event_time": "2026-01-02T10:00:00Z"}',
    )]
    records = good + bad
    return [(k, v, i % partitions, None) for i, (k, v, _, _) in enumerate(records)]


@pytest.fixture(scope="module")
def backlog(spark, bootstrap, tmp_path_factory):
    """A topic with generated and hand-made records, its first 80% archived once; tests copy the archive."""
    topic = "backfill.oracle"
    run_generate(bootstrap, topic, events=3000, keys=40, partitions=PARTITIONS, days=3, seed=7,
                 malformed_rate=0.04, out=open("/dev/null", "w"))
    produce(bootstrap, topic, _edge_records(PARTITIONS))
    run_generate(bootstrap, topic, events=1000, keys=40, partitions=PARTITIONS, days=1, seed=8,
                 malformed_rate=0.04, out=open("/dev/null", "w"))
    warehouse = tmp_path_factory.mktemp("backlog")
    tables = Tables(str(warehouse), PIPELINE.name)
    cut = archive_cut(bootstrap, topic, fraction=0.8)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, cut, out=lambda *_: None)
    records = [r for r in oracle.read_topic(bootstrap, topic) if r.offset < cut[r.partition][1]]
    return {"tables": tables, "records": records, "cut": cut, "topic": topic}


@pytest.fixture
def tables(backlog, tmp_path):
    fresh = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    shutil.copytree(backlog["tables"].archive, fresh.archive)
    return fresh


def _quiet(*_):
    pass


def test_backfill_matches_the_oracle(spark, backlog, tables):
    result = run_backfill(spark, PIPELINE, tables, out=_quiet)
    expected = oracle.backlog(backlog["records"])

    assert_state_matches(spark, tables, expected)
    assert result.backlog_watermark == expected.backlog_watermark
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    dead = {(r.kafka_partition, r.kafka_offset): (r.reason, bytes(r.value) if r.value is not None else None)
            for r in _rows(spark, tables.dead_letter)}
    raw = {(r.partition, r.offset): r.value for r in backlog["records"]}
    assert {k: v[0] for k, v in dead.items()} == expected.dead_letter
    assert all(v[1] == raw[k] for k, v in dead.items()), "dead letters keep the raw bytes"
    assert set(expected.dead_letter.values()) >= {"tombstone", "not_json_object", "missing_key", "bad_event_time",
                                                  "bad_amount"}

    # the accounting identity, per partition, against the oracle's own counts
    assert result.accounting == {p: {"read": expected.read[p], "well_formed": expected.well_formed[p],
                                     "dead_lettered": expected.read[p] - expected.well_formed[p]}
                                 for p in expected.read}
    assert result.records_read == len(backlog["records"])
    assert result.boundary == {p: hi - 1 for p, (_, hi) in backlog["cut"].items()}

    log = handoff_log.entries(tables)
    assert [e.status for e in log] == ["BACKFILL_STARTED", "BACKFILL_COMMITTED"]
    committed = log[-1]
    assert committed.state_version == result.state_version
    assert committed.backlog_watermark == expected.backlog_watermark
    assert details.of(committed).boundary == {str(p): hi - 1 for p, (_, hi) in backlog["cut"].items()}


def test_the_kafka_tail_joins_the_backlog_and_the_handoff_starts_at_its_end(spark, bootstrap, backlog, tables):
    """`backfill --kafka-tail`: the topic's records after the archive, up to its end, aggregated in batch as
    backlog (none of them late), so the handoff starts the stream at the topic's end; against the oracle
    over every record of the topic."""
    topic = backlog["topic"]
    ends = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic).items()}
    run_backfill(spark, PIPELINE, tables, out=_quiet, kafka_tail_from=bootstrap)
    # the commit again (as after a crash before BACKFILL_COMMITTED): its tail's dead letters replace the first's
    result = commit_backfill(spark, PIPELINE, tables, out=_quiet, kafka_tail_from=bootstrap)
    everything = oracle.read_topic(bootstrap, topic)
    expected = oracle.backlog(everything)
    assert len(everything) > len(backlog["records"])  # a fifth of the topic is only in Kafka

    assert_state_matches(spark, tables, expected)
    assert result.backlog_watermark == expected.backlog_watermark
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    dead = {(r.kafka_partition, r.kafka_offset): (r.reason, r.phase) for r in _rows(spark, tables.dead_letter)}
    assert {k: v[0] for k, v in dead.items()} == expected.dead_letter
    cut = {p: hi for p, (_, hi) in backlog["cut"].items()}
    assert {k: v[1] for k, v in dead.items()} == {(p, o): "backfill" if o < cut[p] else TAIL_PHASE for p, o in dead}
    assert any(v[1] == TAIL_PHASE for v in dead.values())

    # the accounting identity per partition, archive and tail together, against the oracle's counts
    committed = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED))
    tail = committed.kafka_tail
    assert tail["to"] == {str(p): o for p, o in ends.items()} and tail["records"] == len(everything) - len(
        backlog["records"])
    for p in expected.read:
        archived, kafka = committed.archive_accounting[str(p)], tail["accounting"][str(p)]
        assert archived["read"] + kafka["read"] == expected.read[p]
        assert archived["well_formed"] + kafka["well_formed"] == expected.well_formed[p]
        assert kafka["read"] == kafka["well_formed"] + kafka["dead_lettered"]
    assert result.boundary == {p: o - 1 for p, o in ends.items()}

    with pytest.raises(UserError, match="--boundary offsets"):
        run_handoff(spark, PIPELINE, tables, bootstrap, boundary="time")
    assert run_handoff(spark, PIPELINE, tables, bootstrap).start_offsets == ends



def _state_snapshot(spark, tables):
    return sorted((r.key, r.event_count, r.amount_min, r.amount_max, r.last_event_time, r.last_amount,
                   round(r.amount_sum, 6)) for r in _rows(spark, tables.state))


def _assert_same_state(got: list[tuple], want: list[tuple]) -> None:
    """Two snapshots alike, the sums to the last bits their order of addition leaves (a merge of merges adds the
    same amounts in another order)."""
    assert [g[:-1] for g in got] == [w[:-1] for w in want]
    assert all(close(g[-1], w[-1], abs(w[-1])) for g, w in zip(got, want)), [
        (g, w) for g, w in zip(got, want) if not close(g[-1], w[-1], abs(w[-1]))][:3]


def test_rerunning_a_day_and_day_by_day_give_the_same_state(spark, backlog, tables, tmp_path, monkeypatch):
    """...and a commit deletes the files it and earlier runs replaced (past the retention, here none)."""
    monkeypatch.setattr(delta_upkeep, "RETENTION_HOURS", 0)
    result = run_backfill(spark, PIPELINE, tables, out=_quiet)
    ranged = _state_snapshot(spark, tables)
    day = str(result.first_day + timedelta(days=1))
    run_backfill(spark, PIPELINE, tables, day, day, out=_quiet)
    _assert_same_state(_state_snapshot(spark, tables), ranged)  # read from the table, not the tiles kept by key
    for path in (tables.tiles, tables.state, tables.windows, tables.window_state, tables.dead_letter):
        table = DeltaTable(path)
        assert len(table.history()) >= 2, path  # written by both runs: the first run's files were replaced
        active = {uri.removeprefix("file://") for uri in table.file_uris()}
        on_disk = {os.path.join(root, name) for root, _, names in os.walk(path) if "_delta_log" not in root
                   for name in names if name.endswith(".parquet")}
        assert on_disk == active, path

    daily = Tables(str(tmp_path / "daily"), PIPELINE.name)
    shutil.copytree(tables.archive, daily.archive)
    d = result.first_day
    while d <= result.last_day:
        run_backfill(spark, PIPELINE, daily, str(d), str(d), out=_quiet)
        d += timedelta(days=1)
    _assert_same_state(_state_snapshot(spark, daily), ranged)
    assert sorted(map(tuple, _rows(spark, daily.windows))) == sorted(map(tuple, _rows(spark, tables.windows)))


def test_a_new_day_is_merged_into_the_earlier_merge_not_every_tile(spark, bootstrap, backlog, tables):
    """The nightly backfill: a commit after a day newly tiled merges that day's tiles into the merge the last commit
    recorded (its state), not every tile, and makes only the windows the day's panes lie in. A day tiled again over
    itself merges every tile. A Kafka tail folded in makes the state more than the tiles' merge, so the commit after
    it merges every tile and does not fold the tail in twice. Each ends equal to the oracle over what it covers.
    (A rebase at a cut keeps its tiles' merge apart, in `backlog`: tests/jobs/test_rebase.py.)"""
    lines: list[str] = []
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    days = sorted({r.event_date for r in _rows(spark, tables.tiles)})  # the days with well-formed records
    assert len(days) >= 3
    tables_fresh = Tables(tables.warehouse + "-nightly", PIPELINE.name)
    shutil.copytree(tables.archive, tables_fresh.archive)
    earlier = run_backfill(spark, PIPELINE, tables_fresh, str(days[0]), str(days[-2]), out=_quiet)
    run_backfill(spark, PIPELINE, tables_fresh, str(days[-1]), str(days[-1]), out=lines.append)
    assert f"  merging 1 newly tiled day(s) into the earlier merge (state version {earlier.state_version})" in lines
    assert f"  making the windows from {days[-1]} 00:00 on again, the earlier ones kept" in lines, lines
    expected = oracle.backlog(backlog["records"])
    assert_state_matches(spark, tables_fresh, expected)
    assert_windows_match(spark, tables_fresh.windows, expected.final_windows())
    assert_windows_match(spark, tables_fresh.window_state, expected.open_windows())
    record = details.of(handoff_log.latest(tables_fresh, Status.BACKFILL_COMMITTED)).backlog
    assert record["table"] == "state"

    lines.clear()  # a day merged before, tiled again: its old tiles are in the earlier merge, so every tile
    run_backfill(spark, PIPELINE, tables_fresh, str(days[1]), str(days[1]), out=lines.append)
    assert any(line.startswith(f"  merging every tile: days merged before were tiled again ({days[1]})")
               for line in lines), lines
    assert_state_matches(spark, tables_fresh, expected)

    lines.clear()  # the Kafka tail on top of the earlier merge: the state holds the tail too, so it is no merge
    commit_backfill(spark, PIPELINE, tables_fresh, out=lines.append, kafka_tail_from=bootstrap)  # of the tiles alone
    assert any(line.startswith("  merging 0 newly tiled day(s)") for line in lines), lines
    assert_state_matches(spark, tables_fresh, oracle.backlog(oracle.read_topic(bootstrap, backlog["topic"])))
    assert details.of(handoff_log.latest(tables_fresh, Status.BACKFILL_COMMITTED)).backlog is None

    lines.clear()  # so the next commit merges every tile, and does not fold the tail in again
    commit_backfill(spark, PIPELINE, tables_fresh, out=lines.append)
    assert "  merging every tile: no earlier commit recorded its merge of the tiles" in lines, lines
    assert_state_matches(spark, tables_fresh, expected)
    _assert_same_state(_state_snapshot(spark, tables_fresh), _state_snapshot(spark, tables))


def _some_file(tables):
    from switchyard.state_handoff.io.archive_files import list_archive

    return list_archive(tables.archive)[0]


def test_corrupt_file_stops_the_run_and_changes_nothing(spark, tables):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    before_state, before_log = _state_snapshot(spark, tables), len(handoff_log.entries(tables))
    bad = _some_file(tables)
    with open(bad.path, "r+b") as fh:
        fh.truncate(40)
    with pytest.raises(UserError, match=bad.path.replace("+", r"\+") + ".*--skip-bad-files"):
        run_backfill(spark, PIPELINE, tables, out=_quiet)
    assert _state_snapshot(spark, tables) == before_state
    assert len(handoff_log.entries(tables)) == before_log

    result = run_backfill(spark, PIPELINE, tables, skip_bad_files=True, out=_quiet)
    assert result.skipped_files == [bad.path]
    committed = details.of(handoff_log.latest(tables))
    assert committed.skipped_files == [bad.path]
    assert {g["file"] for g in committed.gaps} == {bad.path}


def _offsets_held(path: str) -> dict[int, tuple[int, int, int]]:
    """Per partition (lowest, highest, count) of one archive file, read here independently of the archive code."""
    import pyarrow.parquet as pq

    columns = pq.read_table(path).to_pydict()
    held: dict[int, list[int]] = {}
    for partition, offset in zip(columns["kafka_partition"], columns["kafka_offset"]):
        held.setdefault(partition, []).append(offset)
    return {p: (min(o), max(o), len(o)) for p, o in held.items()}


def test_a_skipped_file_below_the_boundary_stops_the_handoff(spark, bootstrap, topic_name, tmp_path):
    """--skip-bad-files leaves a file out of the backfill; its offsets, recorded by the archive, stop the handoff."""
    from switchyard.jobs.handoff import run_handoff
    from switchyard.state_handoff.io.archive_files import ARCHIVE_META, list_archive

    run_generate(bootstrap, topic_name, events=300, keys=10, partitions=2, days=2, seed=11, malformed_rate=0.05,
                 out=open(os.devnull, "w"))
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=_quiet)
    held = {f.path: _offsets_held(f.path) for f in list_archive(tables.archive)}
    meta_path = os.path.join(tables.archive, ARCHIVE_META)
    with open(meta_path) as fh:
        meta = json.load(fh)
    assert meta["files"] == {os.path.relpath(path, tables.archive): {str(p): list(r) for p, r in ranges.items()}
                             for path, ranges in held.items()}

    def highest_elsewhere(path, partition):
        return max((r[partition][1] for other, r in held.items() if other != path and partition in r), default=-1)

    victim, partition, (lo, hi, n) = next((path, p, ranges[p]) for path, ranges in held.items() for p in sorted(ranges)
                                          if ranges[p][0] <= highest_elsewhere(path, p))
    with open(victim, "rb") as fh:
        original = fh.read()
    with open(victim, "r+b") as fh:
        fh.truncate(40)

    run_backfill(spark, PIPELINE, tables, skip_bad_files=True, out=_quiet)
    committed = details.of(handoff_log.latest(tables))
    assert committed.complete is False
    assert {"file": victim, "partition": partition, "from": lo, "to": hi, "records": n,
            "below_boundary": True} in committed.gaps
    named = re.escape(f"archive file {victim} was skipped by --skip-bad-files and holds partition {partition} "
                      f"offsets {lo}..{hi} ({n} records) below the boundary")
    with pytest.raises(UserError, match=named):
        run_handoff(spark, PIPELINE, tables, bootstrap)
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED) is None

    # the fix the message names: restore the file, rerun the backfill, hand off
    with open(victim, "wb") as fh:
        fh.write(original)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)
    assert handoff.start_offsets == {p: hi for p, (_, hi) in archive_cut(bootstrap, topic_name, fraction=1.0).items()}


def test_missing_column_is_named_and_extra_columns_are_ignored(spark, tables):
    import pyarrow.parquet as pq

    target = _some_file(tables)
    table = pq.read_table(target.path)
    crc = os.path.join(os.path.dirname(target.path), f".{os.path.basename(target.path)}.crc")
    os.remove(crc)  # another tool rewrites the file: Hadoop's checksum sidecar no longer applies
    pq.write_table(table.append_column("unexpected", table.column("kafka_offset")), target.path)
    run_backfill(spark, PIPELINE, tables, out=_quiet)  # an extra column is fine

    pq.write_table(table.drop(["kafka_offset"]), target.path)
    with pytest.raises(UserError, match="required column kafka_offset"):
        run_backfill(spark, PIPELINE, tables, out=_quiet)


def test_empty_ranges_and_days_without_files(spark, tables):
    with pytest.raises(UserError, match="empty date range"):
        run_backfill(spark, PIPELINE, tables, "2026-01-03", "2026-01-02", out=_quiet)
    nothing = run_backfill(spark, PIPELINE, tables, "2030-01-01", "2030-01-05", out=_quiet)
    assert nothing.handoff_id is None and "nothing changed" in nothing.summary("demo")
    assert handoff_log.entries(tables) == []

    first = run_backfill(spark, PIPELINE, tables, out=_quiet).first_day
    before = _state_snapshot(spark, tables)
    empty_day = str(first - timedelta(days=1))
    result = run_backfill(spark, PIPELINE, tables, empty_day, str(first), out=_quiet)
    assert result.handoff_id is not None
    _assert_same_state(_state_snapshot(spark, tables), before)


def test_sort_and_hash_strategies_agree(spark, tables, tmp_path):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    hashed = Tables(str(tmp_path / "hash"), PIPELINE.name)
    shutil.copytree(tables.archive, hashed.archive)
    run_backfill(spark, PIPELINE, hashed, strategy="hash", out=_quiet)
    _assert_same_state(_state_snapshot(spark, hashed), _state_snapshot(spark, tables))


def test_a_kafka_range_with_a_partition_that_has_nothing_in_it(spark, bootstrap, topic_name):
    """A rebase's ranges often end where one partition already is: that partition is left out, and the read
    still returns exactly the other partitions' records (subscribe would refuse offsets naming fewer partitions)."""
    from switchyard.jobs.backfill import kafka_range
    from switchyard.state_handoff.io.kafka_io import create_topic

    create_topic(bootstrap, topic_name, partitions=2)
    produce(bootstrap, topic_name, [(b"k", f"v{i}".encode(), i % 2, None) for i in range(10)])
    read = kafka_range(spark, bootstrap, topic_name, {0: 5, 1: 1}, {0: 5, 1: 4})
    assert sorted((r.kafka_partition, r.kafka_offset) for r in read.collect()) == [(1, 1), (1, 2), (1, 3)]


def test_the_archive_is_counted_from_its_metadata_only_where_the_files_hold_every_offset():
    from switchyard.jobs.backfill import dense_spans

    # two files (two days) interleaving partition 0's offsets 0..6, and partition 1's 0..1 in one of them
    assert dense_spans({"d1": {0: (0, 4, 3), 1: (0, 1, 2)}, "d2": {0: (2, 6, 4)}}) == {0: (0, 6, 7), 1: (0, 1, 2)}
    assert dense_spans({"d1": {0: (0, 4, 3)}, "d2": {0: (2, 6, 3)}}) is None  # one offset in 0..6 is in no file
    assert dense_spans({}) is None
