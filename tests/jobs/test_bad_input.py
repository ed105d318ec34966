"""Bounded bad input: records above the size limit, malformed or well-formed, are dead-lettered as too_large with
their size and a bounded prefix, in the archive's backfill, the backfill's Kafka tail and the stream, against the
oracle; a bad limit is refused at the start in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.language.record_limits import DEAD_LETTER_PREFIX_BYTES, MAX_RECORD_BYTES_ENV
from switchyard.state_handoff.tables import Tables
from tests.support.compare import rows
from tests.support.streams import (QUIET, assert_matches_oracle, latest_total, start_stream, stop_stream, stream_read,
                                   tail_events, wait_until)

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]
LIMIT = 4096  # small records stand for the default 1 MiB's huge ones


def oversized(tag: str, partitions: int) -> list[tuple]:
    """Per partition, a malformed record and a well-formed event, each above LIMIT bytes."""
    records = []
    for p in range(partitions):
        body = {"event_id": f"big-{tag}-{p}", "key": f"big-{tag}", "event_time": "2026-01-02T23:30:00Z",
                "amount": 5, "padding": "x" * (LIMIT + 100)}
        records.append((b"big", json.dumps(body).encode(), p, None))
        records.append((b"big", b"{not json " + b"y" * (3 * LIMIT), p, None))
    return records


def test_oversized_records_are_dead_lettered_with_a_bounded_prefix(spark, bootstrap, topic_name, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv(MAX_RECORD_BYTES_ENV, str(LIMIT))  # the stream's process inherits it
    run_generate(bootstrap, topic_name, events=600, keys=15, partitions=2, days=2, seed=5, malformed_rate=0.03,
                 out=QUIET)
    produce(bootstrap, topic_name, oversized("archive", 2))
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    produce(bootstrap, topic_name, oversized("tail", 2))
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None, kafka_tail_from=bootstrap)
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)

    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log)
    try:
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 80, seed=6) + oversized("stream", 2))
        total = latest_total(bootstrap, topic_name, handoff.start_offsets)
        wait_until(lambda: stream_read(tables) >= total, proc, log, what=f"{total} tail records read")
    finally:
        stop_stream(proc, log)
    expected = assert_matches_oracle(spark, bootstrap, topic_name, tables)
    assert not any(key.startswith("big-") for key in expected.state)
    big = [r for r in rows(spark, tables.dead_letter) if r.reason == "too_large"]
    assert sorted(r.phase for r in big) == ["backfill"] * 4 + ["kafka-tail"] * 4 + ["stream"] * 4
    assert all(r.value_bytes > LIMIT and len(r.value) == DEAD_LETTER_PREFIX_BYTES for r in big)
    small = [r for r in rows(spark, tables.dead_letter) if r.reason != "too_large"]
    assert small and all(r.value is None or len(r.value) == r.value_bytes for r in small)


def test_a_bad_record_size_limit_is_refused_in_one_line(tmp_path):
    result = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "status", "--pipeline", "demo", "--warehouse",
                             str(tmp_path / "wh")], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, MAX_RECORD_BYTES_ENV: "1MB"})
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().count("\n") == 0, result.stderr
    assert f"{MAX_RECORD_BYTES_ENV} must be a whole number of bytes from 1024 to 1073741824, not '1MB'" in result.stderr
