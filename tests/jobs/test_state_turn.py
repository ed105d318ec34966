"""The state query's turn (jobs/stream/state.py, StateTurn): half an interval after the trigger, never for a query that
is behind, and never once a drain hurries it. Plain Python and the wall clock; no Spark."""

from __future__ import annotations

import threading
import time

from switchyard.jobs.stream.state import StateTurn

INTERVAL = 1.0


def _at_interval_start() -> None:
    """Sleep to just after a multiple of the interval, as Spark starts a processing-time trigger."""
    time.sleep(INTERVAL - time.time() % INTERVAL + 0.01)


def test_a_batch_on_the_clock_waits_for_half_the_interval():
    turn = StateTurn(INTERVAL)
    _at_interval_start()
    turn.wait()
    assert INTERVAL / 2 <= time.time() % INTERVAL < INTERVAL / 2 + 0.2


def test_a_batch_started_as_the_previous_ended_does_not_wait():
    turn = StateTurn(INTERVAL)
    _at_interval_start()
    turn.done()
    started = time.monotonic()
    turn.wait()
    assert time.monotonic() - started < 0.1


def test_a_drain_cuts_a_wait_short_and_later_ones_out():
    turn = StateTurn(INTERVAL)
    _at_interval_start()
    threading.Timer(0.1, turn.hurry.set).start()
    started = time.monotonic()
    turn.wait()
    assert time.monotonic() - started < 0.3
    _at_interval_start()
    started = time.monotonic()
    turn.wait()
    assert time.monotonic() - started < 0.05
