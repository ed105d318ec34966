"""A rebase and what runs beside it: an `archive` run cannot change the archive's record between the steps of a
rebase that read it."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.state_handoff.control.requests import request_rebase
from switchyard.jobs.rebase.run import rebase_pipeline
from switchyard.state_handoff.control import lease
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import archive_meta
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from tests.jobs.test_rebase import _handoffs, assert_exact_across_handoffs
from tests.jobs.test_rebase_failures import _prepare
from tests.support.streams import stream_until_caught_up, tail_events

PIPELINE = get_pipeline("demo")


def test_an_archive_run_during_a_rebase_is_refused_and_the_rebase_finishes_exactly(spark, bootstrap, topic_name,
                                                                                  tmp_path):
    """Half the topic archived and handed off, streamed to its end, more events; an offline `rebase` runs in this
    process and, once it has read the archive's cut, an `archive` run of the whole topic (as the command runs it,
    under the archive's lease) tries to commit. It is refused in one line naming the rebase, the rebase finishes
    at its cut with nothing different, the archive run afterwards succeeds, and every table equals the oracle."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    stream_until_caught_up(spark, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=47))
    archive_end = archive_meta(tables.archive)["cut"]

    def archive_everything() -> None:
        with lease.hold(tables.archive_writer(), lease.ARCHIVE) as held:
            run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, 1.0),
                        out=lambda *_: None, lease=held)

    refusals, lines = [], []

    def out(line: str) -> None:
        lines.append(line)
        if "recomputing keyed state from the archive" in line:  # the rebase has read the archive's cut
            try:
                archive_everything()
            except UserError as err:
                refusals.append(str(err))

    rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "switchyard rebase", session=lambda: spark, out=out)
    assert len(refusals) == 1 and lease.REBASE in refusals[0] and "\n" not in refusals[0], (refusals, lines)
    assert archive_meta(tables.archive)["cut"] == archive_end  # nothing committed under the rebase
    assert len(_handoffs(tables)) == 2
    archive_everything()  # once the rebase handed off, the archive grows as before
    stream_until_caught_up(spark, tables, bootstrap)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)



def _rebase_streaming_first(spark, tables, bootstrap) -> list[str]:
    """An offline `rebase` given the stream, as the command and Dagster give it; its lines, which say it streamed
    until caught up first."""
    from switchyard.jobs import stream as product_stream

    lines: list[str] = []
    rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "switchyard rebase", session=lambda: spark,
                    finish_stream=product_stream.stream_until_caught_up(PIPELINE, tables, bootstrap,
                                                                         out=lines.append),
                    out=lines.append)
    assert any("streaming until caught up first" in line for line in lines), lines
    return lines


def test_an_offline_rebase_right_after_a_killed_stream_streams_it_until_caught_up_first(spark, bootstrap, topic_name,
                                                                                         tmp_path):
    """A stream killed after its keyed query sent a batch's updates, before the state query merged them into
    `state`, then more events, and a rebase asked of the dead stream. An offline `rebase` refuses in one line naming
    `switchyard stream --until-caught-up` when it cannot stream; given the stream (as the command and Dagster give
    it), it streams until caught up first: the stream restarts the dead one's queries, so the pause for the open
    request replays the batch and merges what was sent, and rebases with no key different; then this rebase, with
    none different either; every table equals the oracle."""
    from switchyard.state_handoff.control import details
    from tests.jobs.test_crash_points import crash

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    crash("stream.keyed.after_send", ["stream", "--max-offsets-per-trigger", "400", "--tables-trigger-seconds", "1",
                                      "--for", "300"], tables, bootstrap, tmp_path / "crash.log")
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=53))
    with pytest.raises(UserError, match=r"^the stream of handoff \w+ ended without a stop, .* run `switchyard stream "
                                        r"--pipeline demo --until-caught-up` first, then rebase again$"):
        rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "switchyard rebase", session=lambda: spark)
    request_rebase(PipelineView.read(tables), "dagster rebase_stream", "rebase")  # asked of the stream that died: the stream's to run
    lines = _rebase_streaming_first(spark, tables, bootstrap)
    handoffs = _handoffs(tables)
    assert len(handoffs) == 3, lines  # the open request's rebase by the stream, then this one's
    for handoff in handoffs[1:]:
        assert details.of(handoff).reconciliation["keys_different"] == 0, lines
    stream_until_caught_up(spark, tables, bootstrap)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


def test_a_rebase_after_a_stop_in_the_middle_of_a_keyed_batch_streams_it_until_caught_up_first(spark, bootstrap,
                                                                                               topic_name, tmp_path):
    """A stop that interrupted a keyed batch after some of its updates reached the updates topic, which the drain
    applied to `state`, leaves the keyed checkpoint's committed end before that batch (here made by removing the last
    keyed commit of a stopped stream: every update of that batch sent and applied). A rebase folding the Kafka range
    from that end would count the batch twice. An offline `rebase` refuses in one line naming `switchyard stream
    --until-caught-up`; given the stream, it streams until caught up first (the restart replays the planned batch),
    then rebases with no key different, and every table equals the oracle."""
    from switchyard.state_handoff.control import details
    from switchyard.state_handoff.control.handoffs import current_handoff
    from switchyard.state_handoff.stream.checkpoints import last_committed_batch
    from switchyard.state_handoff.stream.layout import StreamPaths

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    stream_until_caught_up(spark, tables, bootstrap)
    keyed = StreamPaths.of(tables, current_handoff(tables).handoff_id).keyed_checkpoint
    interrupted = last_committed_batch(keyed)
    for name in (str(interrupted), f".{interrupted}.crc"):
        (Path(keyed) / "commits" / name).unlink(missing_ok=True)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=59))
    with pytest.raises(UserError, match=rf"^the stream of handoff \w+ stopped in the middle of its keyed batch "
                                        rf"{interrupted}, .* run `switchyard stream --pipeline demo --until-caught-up` "
                                        r"first, then rebase again$"):
        rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "switchyard rebase", session=lambda: spark)
    lines = _rebase_streaming_first(spark, tables, bootstrap)
    handoffs = _handoffs(tables)
    assert len(handoffs) == 2, lines
    assert details.of(handoffs[1]).reconciliation["keys_different"] == 0, lines
    stream_until_caught_up(spark, tables, bootstrap)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


def test_a_sigterm_mid_rebase_stops_it_between_its_steps_and_the_next_stream_finishes_it(spark, bootstrap,
                                                                                        topic_name, tmp_path):
    """A live stream asked to rebase gets SIGTERM once the rebase has paused: it stops between the rebase's steps
    (exit 0, well within a service unit's stop timeout), logging no FAILED and no new handoff; the request stays
    paused at its cut, and the next `switchyard stream` finishes it there, exactly."""
    import signal
    import time

    from switchyard.state_handoff.control import handoff_log
    from switchyard.state_handoff.control.lifecycle import Status
    from tests.support.streams import start_stream, wait_until

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    log = tmp_path / "stream.log"
    proc = start_stream(tables, bootstrap, log, "--tables-trigger-seconds", "1")
    wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, proc, log, "SWITCHED")
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=48))
    request_rebase(PipelineView.read(tables), "test", "rebase")
    wait_until(lambda: handoff_log.latest(tables, Status.PAUSED) is not None, proc, log, "PAUSED")
    asked = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=240) == 0, log.read_text()[-3000:]
    assert time.monotonic() - asked < 240
    statuses = [e.status for e in handoff_log.entries(tables)]
    assert statuses[-1] == Status.PAUSED and Status.FAILED not in statuses, statuses
    assert "finishes it there" in log.read_text()
    assert PipelineView.read(tables).ledger.open_rebase.paused is not None
    again = start_stream(tables, bootstrap, tmp_path / "again.log", "--until-caught-up", "--tables-trigger-seconds", "1")
    assert again.wait(timeout=600) == 0, (tmp_path / "again.log").read_text()[-3000:]
    assert len(_handoffs(tables)) == 2
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
