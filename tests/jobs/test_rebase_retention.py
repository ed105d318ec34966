"""Kafka's retention past the archive's cut: a rebase that can no longer read its range is refused before the
stream pauses, and a paused rebase that can no longer finish is abandoned; either way the stream goes on from its
own streamed state, exactly (the oracle holds the records as they were before Kafka deleted them)."""

from __future__ import annotations

from datetime import datetime

from kafka import TopicPartition

from switchyard.deploy.local_server import free_port
from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.status import format_status, pipeline_status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.archive_files import archive_meta
from switchyard.state_handoff.io.kafka_io import admin_client, offset_bounds, produce
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_rebase import _caught_up_on, _cli, _handoffs, _read_everything, assert_exact_across_handoffs
from tests.jobs.test_rebase_failures import PIPELINE, _prepare, assert_accounting_identity
from tests.support import oracle
from tests.support.cli import cli_here
from tests.support.prometheus import scrape
from tests.support.streams import start_stream, stop_stream, stream_until_caught_up, tail_events, wait_until


def _retention_at(bootstrap: str, topic: str, share: float = 0.75) -> dict[int, int]:
    """Per partition, the offset `share` of the way through what Kafka holds now."""
    return {p: lo + int((hi - lo) * share) for p, (lo, hi) in offset_bounds(bootstrap, topic).items()}


def _delete_below(bootstrap: str, topic: str, offsets: dict[int, int]) -> None:
    with admin_client(bootstrap) as admin:
        admin.delete_records({TopicPartition(topic, p): o for p, o in offsets.items()})


def _every_record(kept: list, bootstrap: str, topic: str) -> list:
    """The records read before the retention deleted some, and every one Kafka holds now."""
    records = {(r.partition, r.offset): r for r in kept}
    records.update({(r.partition, r.offset): r for r in oracle.read_topic(bootstrap, topic)})
    return [records[k] for k in sorted(records)]


def _run(tables: Tables, bootstrap: str, *args: str, env: dict | None = None) -> tuple[int, str]:
    """The command in this process, or in one of its own where a crash point (env) is to kill it."""
    if env is None:
        return cli_here(tables, bootstrap, *args)
    proc = _cli(tables, bootstrap, *args, env=env)
    out, _ = proc.communicate(timeout=900)
    return proc.returncode, out


def _assert_exact(spark, bootstrap, topic, tables: Tables, records: list, monkeypatch) -> None:
    monkeypatch.setattr(oracle, "read_topic", lambda *_: records)  # Kafka no longer holds them all
    expected = assert_exact_across_handoffs(spark, bootstrap, topic, tables)
    assert_accounting_identity(bootstrap, topic, tables, expected)


def test_a_rebase_past_kafkas_retention_is_refused_before_the_pause_and_the_stream_streams_on(
        spark, bootstrap, topic_name, tmp_path, monkeypatch):
    """Half the topic archived, the rest streamed live to caught up; Kafka then deletes each partition below 75%
    (past the archive's cut, all streamed). `rebase` is refused in
    one line before the stream pauses, naming the way forward, and the refusal answers its request; the live
    stream streams on from the same handoff and ends equal to the oracle; `status` shows the retention past the
    archive per partition."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    handoff = _handoffs(tables)[0]
    log = tmp_path / "stream.log"
    port = free_port()
    proc = start_stream(tables, bootstrap, log, "--tables-trigger-seconds", "1", "--metrics-port", str(port))
    try:
        wait_until(lambda: _caught_up_on(tables, handoff.handoff_id), proc, log, "CAUGHT_UP")
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")  # the stream's own, served beside it
        assert metrics[("switchyard_phase", ("phase", "CAUGHT_UP"), ("pipeline", "demo"))] == 1
        assert metrics[("switchyard_stream_running", ("pipeline", "demo"))] == 1
        (epoch,) = [v for k, v in metrics.items()
                    if k[0] == "switchyard_lease_epoch" and ("command", "switchyard stream") in k]
        assert epoch == lease.owner(tables).epoch >= 1
        assert {k[1][1]: v for k, v in metrics.items() if k[0] == "switchyard_offsets_behind"} == {"0": 0, "1": 0}
        kept = oracle.read_topic(bootstrap, topic_name)
        retained_from = _retention_at(bootstrap, topic_name)
        _delete_below(bootstrap, topic_name, retained_from)
        archive_cut = handoff_log.offsets(handoff)

        code, out = _run(tables, bootstrap, "rebase", "--timeout", "300")
        error = out.strip().splitlines()[-1]
        assert code == 2 and "Traceback" not in out, out
        assert error.startswith("switchyard rebase: error: rebase of demo refused before its pause"), out
        assert f"partition 1 offsets {archive_cut[1]}..{retained_from[1] - 1} deleted" in error, error
        assert "the streamed state stands" in error and "switchyard archive" in error, error
        statuses = [e.status for e in handoff_log.entries(tables)]
        assert Status.PAUSED not in statuses and statuses.count(Status.REBASE_REFUSED) == 1, statuses
        assert PipelineView.read(tables).ledger.open_rebase is None, "the refusal answers the request"
        assert proc.poll() is None, log.read_text()[-3000:]
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
        assert {k[1][1]: v for k, v in metrics.items() if k[0] == "switchyard_archive_retention_margin_offsets"} == {
            str(p): archive_cut[p] - o for p, o in retained_from.items()}
        assert metrics[("switchyard_retention_past_archive_partitions", ("pipeline", "demo"))] == 2

        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=51))
        wait_until(lambda: _read_everything(tables, bootstrap, topic_name), proc, log, "the new records read")
    finally:
        if proc.poll() is None:
            stop_stream(proc, log)
    assert len(_handoffs(tables)) == 1, "the same handoff streamed on"
    status = pipeline_status(tables, bootstrap)
    assert status["archive_retention_margin"] == {str(p): archive_cut[p] - o for p, o in retained_from.items()}
    assert [m["partition"] for m in status["retention_past_archive"]] == sorted(retained_from)
    assert "RETENTION PAST THE ARCHIVE: partition 0" in format_status(status)
    _assert_exact(spark, bootstrap, topic_name, tables, _every_record(kept, bootstrap, topic_name), monkeypatch)


def test_a_paused_rebase_past_kafkas_retention_is_abandoned_and_the_stream_resumes_exactly(
        spark, bootstrap, topic_name, tmp_path, monkeypatch):
    """A rebase killed right after its pause; Kafka then deletes past the archive's cut: the next `stream` runs the
    paused rebase, which cannot read its range and refuses, naming `rebase --abandon`; that gives the request up
    (REBASE_ABANDONED, the paused state version released), and the next `stream` resumes the paused handoff from
    its checkpoint, equal to the oracle. With nothing open, `--abandon` refuses in one line."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    log = tmp_path / "stream.log"
    stream_until_caught_up(spark, tables, bootstrap)
    retained_from = _retention_at(bootstrap, topic_name)  # below where the stream has read to
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=52))
    code, out = _run(tables, bootstrap, "rebase", "--timeout", "300", env={faults.ENV: "rebase.after_pause"})
    assert code == -9, out
    assert PipelineView.read(tables).ledger.open_rebase.paused is not None
    kept = oracle.read_topic(bootstrap, topic_name)
    _delete_below(bootstrap, topic_name, retained_from)

    stream = start_stream(tables, bootstrap, log, "--until-caught-up", "--tables-trigger-seconds", "1")
    assert stream.wait(timeout=600) == 2, log.read_text()[-3000:]
    error = log.read_text().strip().splitlines()[-1]
    assert "no longer retains offset" in error and "`switchyard rebase --abandon`" in error, error

    code, out = _run(tables, bootstrap, "rebase", "--abandon")
    assert code == 0 and "Traceback" not in out, out
    assert [e.status for e in handoff_log.entries(tables)][-1] == Status.REBASE_ABANDONED
    assert PipelineView.read(tables).ledger.open_rebase is None
    assert PipelineView.read(tables).ledger.paused_state_versions == {}
    code, out = _run(tables, bootstrap, "rebase", "--abandon")
    assert code == 2 and out.strip().splitlines()[-1] == (
        "switchyard rebase: error: pipeline demo has no open rebase request: nothing to abandon"), out

    stream_until_caught_up(spark, tables, bootstrap)
    assert len(_handoffs(tables)) == 1, "the paused handoff resumed"
    _assert_exact(spark, bootstrap, topic_name, tables, _every_record(kept, bootstrap, topic_name), monkeypatch)


def _rebase_then_stream(spark, bootstrap, topic, tables: Tables, kept: list, tmp_path, monkeypatch) -> None:
    """`switchyard rebase`, new events, a stream to caught up; then every table equal to the oracle over `kept` and
    whatever Kafka holds now."""
    code, out = _run(tables, bootstrap, "rebase", "--timeout", "300")
    assert code == 0, out[-3000:]
    produce(bootstrap, topic, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=8))
    stream_until_caught_up(spark, tables, bootstrap)
    _assert_exact(spark, bootstrap, topic, tables, _every_record(kept, bootstrap, topic), monkeypatch)


def test_a_stream_behind_kafkas_retention_is_rebased_from_the_archive(spark, bootstrap, topic_name, tmp_path,
                                                                      monkeypatch):
    """Half the topic archived and handed off, streamed to caught up and stopped; more events arrive and the
    archive grows past them; Kafka's retention then deletes everything archived, past where the stream stopped.
    The stream fails in one line naming `switchyard rebase`; the rebase reads the records the stream never read
    from the archive (Kafka no longer holds them), and the stream after it ends equal to the oracle."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    stream_until_caught_up(spark, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 150, seed=7))
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    kept = oracle.read_topic(bootstrap, topic_name)
    archived = {int(p): int(o) for p, o in archive_meta(tables.archive)["cut"].items()}
    _delete_below(bootstrap, topic_name, archived)

    code, out = _run(tables, bootstrap, "stream", "--until-caught-up", "--tables-trigger-seconds", "1")
    errors = [line for line in out.splitlines() if line.startswith("switchyard stream: error:")]
    assert code == 1 and len(errors) == 1, out[-3000:]  # Spark's own log lines above it are its executors' WARN
    assert "the archive holds them: run `switchyard rebase --pipeline demo`" in errors[0], errors[0]
    _rebase_then_stream(spark, bootstrap, topic_name, tables, kept, tmp_path, monkeypatch)


def test_a_handoff_whose_start_kafka_deleted_but_the_archive_holds_is_rebased_not_lost(spark, bootstrap, topic_name,
                                                                                        tmp_path, monkeypatch):
    """Half the topic archived and handed off; before the stream ever runs, the archive grows to the whole topic and
    Kafka's retention deletes everything archived, the handoff's start included. The stream refuses in one line
    naming `switchyard rebase` (not the restart that would record the records as lost); after the rebase the
    stream ends equal to the oracle over every record."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    kept = oracle.read_topic(bootstrap, topic_name)
    _delete_below(bootstrap, topic_name, {int(p): int(o) for p, o in archive_meta(tables.archive)["cut"].items()})

    code, out = _run(tables, bootstrap, "stream", "--until-caught-up", "--tables-trigger-seconds", "1")
    assert code == 2 and "but the archive holds them: run `switchyard rebase --pipeline demo`" in out, out[-3000:]
    _rebase_then_stream(spark, bootstrap, topic_name, tables, kept, tmp_path, monkeypatch)
    assert details.of(handoff_log.latest(tables, Status.HANDOFF_COMMITTED)).lost is None
