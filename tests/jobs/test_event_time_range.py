"""Any event time counts or is dead-lettered, the same way on every path: records of year 10000 and year 0 (which
the ISO-8601 pattern accepts, with an offset) in the archive, the backfill's Kafka tail and the live stream are
dead-lettered as out_of_range_event_time; the accepted range's ends count (the upper one moves the watermark to
year 9998); every archive day folder reads back as a day; a rebase after all of it finishes and every table equals the oracle, each record once."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.archive_files import folder_day, list_archive
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_rebase import _handoffs, assert_exact_across_handoffs
from tests.support.cli import cli_here
from tests.support.compare import rows
from tests.support.streams import stream_until_caught_up, tail_events

PIPELINE = get_pipeline("demo")


def hostile(tag: str, partitions: int, *times: str) -> list[tuple]:
    """Per partition, one well-formed record at each of `times` (year 10000 and year 0 by default)."""
    times = times or ("9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00")
    return [(b"edge", json.dumps({"event_id": f"{tag}-{p}-{i}", "key": f"edge-{tag}", "event_time": t,
                                  "amount": 1}).encode(), p, None)
            for p in range(partitions) for i, t in enumerate(times)]


def _assert_accounting_identity(tables: Tables, expected) -> None:
    """Per partition, the first backfill (its archive and its Kafka tail) and every handoff's events batches read
    each record once, and well-formed + dead-lettered = read."""
    first = details.of(next(e for e in handoff_log.entries(tables) if e.status == Status.BACKFILL_COMMITTED))
    streamed = stream_progress.accounting([b for h in _handoffs(tables)
                                           for b in stream_progress.batches(tables, h.handoff_id)])
    for p in expected.read:
        parts = [first.accounting, first.kafka_tail["accounting"], streamed]
        total = {name: sum(part.get(str(p), {}).get(name, 0) for part in parts)
                 for name in ("read", "well_formed", "dead_lettered")}
        assert total["read"] == expected.read[p] and total["well_formed"] == expected.well_formed[p], (p, total)
        assert total["read"] == total["well_formed"] + total["dead_lettered"], (p, total)


def test_event_times_outside_the_accepted_range_are_dead_lettered_on_every_path(spark, bootstrap, topic_name,
                                                                              tmp_path):
    run_generate(bootstrap, topic_name, events=400, keys=12, partitions=2, days=2, seed=8, malformed_rate=0.03,
                 out=open(os.devnull, "w"))
    produce(bootstrap, topic_name, hostile("archive", 2, "9999-12-31T23:30:00-01:00", "0001-01-01T00:30:00+01:00",
                                           "0002-01-01T00:00:00Z"))
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    folders = [name for name in storage.list_dir(tables.archive) if name.startswith("event_date=")]
    assert all(folder_day(name) is not None for name in folders), folders
    assert "event_date=0002-01-01" in folders
    archived_files = len(list_archive(tables.archive))

    produce(bootstrap, topic_name, hostile("tail", 2))
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None, kafka_tail_from=bootstrap)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=9) + hostile("stream", 2)
            + hostile("end", 2, "9998-12-31T23:59:59.999999Z"))
    stream_until_caught_up(spark, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 20, seed=11) + hostile("cut", 2))

    rebase, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    assert rebase == 0 and "Traceback" not in out, out
    stream_until_caught_up(spark, tables, bootstrap)
    assert len(_handoffs(tables)) == 2 and len(list_archive(tables.archive)) == archived_files

    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    _assert_accounting_identity(tables, expected)
    dead = {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)}
    assert dead == expected.dead_letter
    reasons = Counter(r.reason for r in rows(spark, tables.dead_letter) if r.value and b"edge-" in r.value)
    assert reasons == {"out_of_range_event_time": 2 * 2 * 4}, reasons  # two per partition in four phases
    state = {r.key: r for r in rows(spark, tables.state)}
    assert state["edge-archive"].event_count == 2 and state["edge-end"].event_count == 2
    assert state["edge-end"].last_event_time == datetime(9998, 12, 31, 23, 59, 59, 999999)
