"""`switchyard dev live` (events stamped with the current time, paced) and `generate --start`, on a real broker."""

import io
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from switchyard.jobs.cli.inputs import parse_start
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.inputs.live import run_live
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import create_topic, paced
from tests.support.demo_events import parse_event
from tests.support.oracle import read_topic


def test_live_events_are_paced_stamped_now_and_well_formed(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=2)
    lines = []
    before = datetime.now(UTC)
    started = time.monotonic()
    sent = run_live(bootstrap, topic_name, rate=40, keys=50, seed=3, seconds=3.0, out=lines.append)
    took = time.monotonic() - started
    after = datetime.now(UTC)
    assert 100 <= sent <= 125 and took >= 2.9, (sent, took)  # 40/s for 3 s, not a burst
    records = read_topic(bootstrap, topic_name)
    assert len(records) == sent
    events = [parse_event(r.value) for r in records]
    assert all(e is not None for e in events), "every live event has the demo's shape"
    times = [datetime.fromisoformat(e["event_time"]) for e in events]
    assert before - timedelta(seconds=1) <= min(times) and max(times) <= after
    assert {e["key"] for e in events} <= {f"key-{k:06d}" for k in range(50)}
    assert len({e["event_id"] for e in events}) == sent
    assert all(r.key == e["key"].encode() for r, e in zip(records, events))
    assert lines[-1].startswith(f"live: stopped; {sent:,} events sent and acknowledged")


def test_paced_keeps_the_pace_and_never_sends_more_than_rate_times_seconds():
    """Records go as they fall due (a millisecond's worth at once), in order, at most rate x seconds of them."""
    started = time.monotonic()
    taken = list(paced(iter(range(10**6)), rate=4000, seconds=0.5))
    took = time.monotonic() - started
    assert 1000 <= len(taken) <= 2000 and taken == list(range(len(taken))), len(taken)  # a stall at the end costs some
    assert took >= 0.49, took  # paced, not a burst
    # with a lead of 0.2 s every record due within it goes at once, but none due after the end
    assert len(list(paced(iter(range(1000)), rate=100, seconds=0.5, ahead_s=0.2))) == 50


def test_live_stops_cleanly_on_sigterm(bootstrap, topic_name):
    create_topic(bootstrap, topic_name, partitions=1)
    process = subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", "dev", "live", "--topic", topic_name, "--rate", "50",
                                "--bootstrap", bootstrap], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not read_topic(bootstrap, topic_name):
        time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 0, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("live: stopped on SIGTERM;"), output
    sent = int(last.split(";")[1].split()[0].replace(",", ""))
    assert sent == len(read_topic(bootstrap, topic_name)) > 0


def test_live_to_a_missing_topic_is_one_line(bootstrap):
    with pytest.raises(UserError) as err:
        run_live(bootstrap, "no.such.topic.live", rate=10, keys=5, seed=1, seconds=1.0, out=lambda _l: None)
    assert "no.such.topic.live" in str(err.value) and "\n" not in str(err.value)


def test_generate_start_moves_the_event_times(bootstrap, topic_name):
    start = parse_start("2026-11-19")
    assert start == datetime(2026, 11, 19, tzinfo=UTC)
    assert parse_start("2026-11-19T06:00:00+02:00") == datetime(2026, 11, 19, 4, tzinfo=UTC)
    run_generate(bootstrap, topic_name, events=400, keys=20, partitions=2, days=3, seed=5, malformed_rate=0.0,
                 start=start, out=io.StringIO())
    times = [datetime.fromisoformat(parse_event(r.value)["event_time"]) for r in read_topic(bootstrap, topic_name)]
    assert start - timedelta(minutes=5) <= min(times) and max(times) < start + timedelta(days=3)
    with pytest.raises(UserError) as err:
        parse_start("yesterday")
    assert "--start" in str(err.value)
