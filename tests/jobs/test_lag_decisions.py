"""The stream's lag decisions over a given clock, without Spark or Kafka: caught up and falling behind with
hysteresis, and the switch back after the lag stays high, held off after one until the stream has been caught up a
while; decided by cost, made only when a rebase is estimated to end sooner than the stream drains its backlog."""

import math

import pytest

from switchyard.jobs.stream.lag import LagDecisions
from switchyard.jobs.stream.options import StreamOptions
from switchyard.state_handoff.control.lifecycle import Status


def _decisions(**given) -> LagDecisions:
    return LagDecisions.of(StreamOptions(**{"caught_up_lag": 10, "falling_behind_lag": 100, "switch_back_lag": 1000,
                                             "switch_back_after": 30.0, "switch_back_hold": 120.0,
                                             "state_partitions": 1, "switch_back_when": "lag", **given}))


def test_caught_up_and_falling_behind_with_hysteresis():
    lag = _decisions()
    assert lag.phase(0.0, 500) is None
    assert lag.phase(1.0, 10, state_updates_behind=50) is None, "its updates not yet applied to state"
    assert lag.phase(2.0, 10, state_updates_behind=0) == Status.CAUGHT_UP
    assert (lag.caught_up, lag.caught_up_since) == (True, 2.0)
    assert lag.phase(3.0, 10) is None, "entered once"
    assert lag.phase(4.0, 100) is None, "between the two thresholds: still caught up"
    assert lag.phase(5.0, 101) == Status.FALLING_BEHIND
    assert (lag.caught_up, lag.caught_up_since) == (False, None)
    assert lag.phase(6.0, 50) is None, "under the falling-behind threshold is not caught up again"
    assert lag.phase(7.0, 0) == Status.CAUGHT_UP


def test_the_falling_behind_threshold_defaults_to_ten_times_the_caught_up_lag_and_at_least_1000():
    assert _decisions(falling_behind_lag=None).behind_threshold == 1000
    assert _decisions(falling_behind_lag=None, caught_up_lag=500).behind_threshold == 5000


def test_a_switch_back_needs_the_lag_high_for_the_whole_hold():
    lag = _decisions()
    assert not lag.switch_back(0.0, 5000)
    assert not lag.switch_back(29.9, 5000)
    assert not lag.switch_back(30.0, 900), "it dipped under the threshold: the clock starts again"
    assert not lag.switch_back(31.0, 5000) and lag.behind_for(31.0) == 0.0
    assert not lag.switch_back(60.9, 5000)
    assert lag.switch_back(61.0, 5000) and lag.last_switch_back == 61.0


def test_after_a_switch_back_none_again_until_caught_up_for_the_hold():
    lag = _decisions()
    lag.last_switch_back = 0.0  # one was made before this handoff's stream began
    assert not lag.switch_back(100.0, 5000) and not lag.switch_back(200.0, 5000), "never caught up since"
    assert lag.phase(210.0, 0) == Status.CAUGHT_UP
    assert lag.phase(211.0, 5000) == Status.FALLING_BEHIND
    assert not lag.switch_back(250.0, 5000), "caught up, but not for the hold"
    assert lag.phase(300.0, 0) == Status.CAUGHT_UP
    lag.behind_since = None
    assert not lag.switch_back(430.0, 5000) and not lag.switch_back(459.0, 5000)
    assert lag.switch_back(460.0, 5000), "caught up since 300 for 160 s, and behind for 30 s"


def test_never_with_switch_back_off():
    lag = _decisions(switch_back_lag=None)
    assert not any(lag.switch_back(t, 10**9) for t in (0.0, 100.0, 10_000.0))


def _looks(lag: LagDecisions, until: float, behind0: int, processed_per_s: float, arriving, latest0: int = 0,
           start: float = 0.0, every: float = 0.5) -> bool:
    """Looks every `every` s from `start` to `until`: the input grows by `arriving(t)` records a second, the stream
    processes `processed_per_s`; whether the last look switched back."""
    t, latest, processed, decided = start, latest0, latest0 - behind0, False
    while t <= until + 1e-9:
        decided = lag.switch_back(t, latest - processed, latest)
        if decided:
            return True
        latest += int(arriving(t) * every)
        processed = min(latest, processed + int(processed_per_s * every))
        t += every
    return decided


def _by_cost(**given) -> LagDecisions:
    return _decisions(switch_back_lag=100_000, switch_back_after=10.0, switch_back_when="cost", **given)


def test_by_cost_a_burst_the_stream_drains_sooner_is_streamed_and_the_estimate_is_told_once():
    lag = _by_cost()
    assert not _looks(lag, 60.0, 1_000_000, processed_per_s=50_000, arriving=lambda t: 1000)
    assert lag.last_switch_back is None
    told = lag.estimate
    assert told.processed_per_s == pytest.approx(50_000, rel=0.05) and told.arriving_per_s == pytest.approx(1000, rel=0.1)
    assert told.stream_s < told.rebase_s and not told.rebase_sooner
    assert lag.declined is not None and lag.declined.behind == 1_000_000 - 49_000 * 10, "told at the first decision"
    lag.declined = None  # the monitor said it
    assert not lag.switch_back(61.0, 200_000, 10**7) and lag.declined is None, "told once while behind"


def test_by_cost_a_backlog_a_rebase_ends_sooner_is_switched_back():
    lag = _by_cost()
    assert _looks(lag, 60.0, 10_000_000, processed_per_s=20_000, arriving=lambda t: 1000)
    assert lag.last_switch_back == pytest.approx(10.0)
    assert lag.estimate.rebase_sooner and lag.estimate.rebase_s == pytest.approx(30 + lag.estimate.behind / 50_000)
    assert lag.estimate.as_details()["stream_s"] == pytest.approx(lag.estimate.stream_s, abs=0.1)


def test_by_cost_a_stream_that_does_not_gain_on_its_input_is_switched_back():
    lag = _by_cost()
    assert _looks(lag, 60.0, 200_000, processed_per_s=50_000, arriving=lambda t: 60_000)
    assert math.isinf(lag.estimate.stream_s) and lag.estimate.as_details()["stream_s"] is None
    assert "never drains them" in lag.estimate.describe()


def test_by_cost_the_input_rate_is_the_latest_one_not_a_burst_already_written():
    lag = _by_cost()  # 300,000 a second for 3 s, then the trickle: decided at 10 s, by the trickle
    assert not _looks(lag, 30.0, 150_000, processed_per_s=50_000, arriving=lambda t: 300_000 if t < 3 else 1000)
    assert lag.estimate.arriving_per_s == pytest.approx(1000, rel=0.1)


def test_by_cost_no_switch_back_without_two_looks_to_measure_from():
    lag = _by_cost()
    assert not lag.switch_back(0.0, 10**7) and not lag.switch_back(20.0, 10**7)
    assert lag.estimate is None and lag.last_switch_back is None


def test_the_way_of_deciding_is_a_setting(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_SWITCH_BACK", "lag")
    assert LagDecisions.of(StreamOptions(state_partitions=1)).switch_back_when == "lag"
    monkeypatch.delenv("SWITCHYARD_SWITCH_BACK")
    assert LagDecisions.of(StreamOptions(state_partitions=1)).switch_back_when == "cost"


def test_by_cost_no_decision_before_the_stream_has_committed_three_batches_while_behind():
    lag = _by_cost()  # a burst of 10^6 written; a trickle batch commits, then the first batch over the burst runs
    assert not lag.switch_back(0.0, 1_000_000, 1_000_000) and not lag.switch_back(5.0, 1_001_000, 1_005_000)
    assert not lag.switch_back(10.0, 1_006_000, 1_010_000) and lag.estimate is None, "its first batch still running"
    assert not lag.switch_back(14.0, 810_000, 1_014_000) and lag.estimate is None, "two batches: its start in them"
    assert not lag.switch_back(18.0, 614_000, 1_018_000), "three: 200,000 in 4 s, the stream drains it sooner"
    assert lag.estimate.processed_per_s == pytest.approx(50_000, rel=0.05) and not lag.estimate.rebase_sooner
