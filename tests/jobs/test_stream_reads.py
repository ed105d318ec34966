"""A stream decides from one look at its pipeline per turn: from `run_stream` to SWITCHED the handoff log is read at
most twice (the check before the lease, then the turn's view), however many steps decide from it."""

from __future__ import annotations

from datetime import datetime

from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.kafka_io import produce
from tests.jobs.test_stream import _prepare
from tests.support.streams import stream_until_caught_up, tail_events


def test_the_log_is_read_at_most_twice_from_run_stream_to_switched(spark, bootstrap, topic_name, tmp_path,
                                                                   monkeypatch):
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", partitions=2, events=600)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=3))
    reads, at_switched = [], []
    read, append = handoff_log.entries, handoff_log.append

    def counted(t):
        reads.append(t.pipeline)
        return read(t)

    def noted(t, handoff_id, status, **fields):
        if status == Status.SWITCHED:
            at_switched.append(len(reads))
        return append(t, handoff_id, status, **fields)

    monkeypatch.setattr(handoff_log, "entries", counted)
    monkeypatch.setattr(handoff_log, "append", noted)
    stream_until_caught_up(spark, tables, bootstrap)
    monkeypatch.undo()
    assert len(at_switched) == 1, "one SWITCHED for the one handoff"
    assert at_switched[0] <= 2, f"{at_switched[0]} reads of the log before SWITCHED"
    assert handoff_log.latest(tables, Status.STOPPED) is not None
