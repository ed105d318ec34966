"""`switchyard status` as people read it: figures rounded, per-partition figures summed."""

from __future__ import annotations

from switchyard.state_handoff.control.status import format_status


def test_status_shows_rates_and_durations_to_one_decimal():
    shown = format_status({"pipeline": "demo", "phase": "caught up", "latest_status": "CAUGHT_UP",
                           "latest_at": "2026-11-25T00:00:00+00:00", "input_rows_per_s": 34.136546184738954,
                           "last_batch_ms": 1204, "offsets_behind": {"0": 3, "1": 0},
                           "stream_accounting": None, "processed_rows_per_s": 12345.678})
    assert "  input rate (rows/s): 34.1\n" in shown + "\n"
    assert "  processed rate (rows/s): 12,345.7" in shown
    assert "  last batch (ms): 1204" in shown and "  offsets behind latest: p0:3, p1:0 (total 3)" in shown
    assert "34.13" not in shown


def test_a_status_looks_at_kafka_once_and_not_again_for_a_while_once_it_is_out_of_reach(tmp_path, monkeypatch):
    """Kafka's figures (the retention margin, the offsets behind) come from one look per status; after a look found
    Kafka out of reach, the statuses of the next KAFKA_AWAY_S leave them out instead of waiting on it again: a scrape's
    cost does not grow with pipelines times a broker's timeout."""
    from switchyard.state_handoff.control import handoff_log, status
    from switchyard.state_handoff.control.lifecycle import Status
    from switchyard.state_handoff.io import archive_files, kafka_io
    from switchyard.state_handoff.tables import Tables

    tables = Tables(str(tmp_path), "demo")
    archive_files.write_archive_meta(tables.archive, {"topic": "events", "cut": {"0": 10}, "first": {"0": 0}})
    for entry in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED):
        handoff_log.append(tables, "h1", entry, start_offsets={0: 10} if entry == Status.HANDOFF_COMMITTED else None)
    looks = []

    def unreachable(bootstrap, topic):
        looks.append(topic)
        raise kafka_io.NotNow("cannot connect to Kafka")

    monkeypatch.setattr(kafka_io, "offset_bounds", unreachable)
    monkeypatch.setattr(status, "_KAFKA_AWAY", {})
    first = status.pipeline_status(tables, "127.0.0.1:1")
    assert looks == ["events"], "one look for every figure that needs Kafka"
    assert "archive_retention_margin" not in first and first["phase"]
    again = status.pipeline_status(tables, "127.0.0.1:1")
    assert looks == ["events"], "out of reach a moment ago: not looked at again"
    assert again["handoff_id"] == "h1"
    monkeypatch.setattr(status, "_KAFKA_AWAY", {})
    monkeypatch.setattr(kafka_io, "offset_bounds", lambda bootstrap, topic: {0: (4, 25)})
    assert status.pipeline_status(tables, "127.0.0.1:1")["archive_retention_margin"] == {"0": 6}
