"""Bad records (malformed and late) are written once, whichever paths read them, and from the executors: their
values never pass through the driver. Against the oracle."""

from __future__ import annotations

import json
import os
from collections import Counter
from datetime import datetime

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import produce
from tests.jobs.test_rebase import _handoffs, assert_exact_across_handoffs
from tests.jobs.test_rebase_failures import PIPELINE, _prepare, assert_accounting_identity
from tests.support.compare import rows
from tests.support.cli import cli_here
from tests.support.streams import start_stream, stream_until_caught_up, tail_events


def test_malformed_records_in_a_grown_archive_rebased_offline_are_dead_lettered_once(spark, bootstrap, topic_name,
                                                                                    tmp_path):
    """A stream streams and stops; records (malformed ones among them) arrive and the archive grows over them, past
    where the stream stopped; `rebase` with no stream live tiles the new days (dead-lettering their malformed
    records) and catches the events path up over the same offsets: each malformed record is in `dead_letter` once."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    stream_until_caught_up(spark, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 0), 60, seed=51))
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 30, seed=52))  # past the archive
    rebase, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    assert rebase == 0, out
    assert len(_handoffs(tables)) == 2
    phases = Counter(r.phase for r in rows(spark, tables.dead_letter))
    assert phases["backfill"] >= 4, phases  # the grown archive's malformed records were the backfill's to write
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)  # each dead-lettered once
    assert_accounting_identity(bootstrap, topic_name, tables, expected)


def test_a_batch_of_large_bad_records_beyond_the_drivers_result_limit(spark, bootstrap, topic_name, tmp_path):
    """A stream whose driver accepts 1 MB of task results in all reads a batch of malformed and late records of
    0.9 MB each: it writes every one whole to `dead_letter` and `late` (its executors write them) and streams on."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=1.0)
    big = 900_000
    late = [json.dumps({"event_id": f"big-late-{i}", "key": f"key-{i:06d}", "event_time": "2026-01-01T00:15:00Z",
                        "amount": i, "kind": "x" * big}).encode() for i in range(4)]
    malformed = [b"{" + bytes([ord("a") + i]) * big for i in range(4)]
    produce(bootstrap, topic_name, [(b"big", v, i % 2, None) for i, v in enumerate(late + malformed)])
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, "--until-caught-up", "--tables-trigger-seconds", "1",
                        env={"PYSPARK_SUBMIT_ARGS": "--conf spark.driver.maxResultSize=1m pyspark-shell"})
    assert proc.wait(timeout=600) == 0, log.read_text()[-3000:]
    assert handoff_log.latest(tables, Status.FAILED) is None
    assert set(malformed) <= {bytes(r.value) for r in rows(spark, tables.dead_letter) if r.value is not None}
    assert set(late) <= {bytes(r.value) for r in rows(spark, tables.late)}
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert_accounting_identity(bootstrap, topic_name, tables, expected)
    assert os.path.getsize(log) < 1_000_000  # no value printed in a log line either
