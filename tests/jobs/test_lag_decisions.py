"""The stream's lag decisions over a given clock, without Spark or Kafka: caught up and falling behind with
hysteresis, and the switch back after the lag stays high, held off after one until the stream has been caught up a
while."""

from switchyard.jobs.stream.lag import LagDecisions
from switchyard.jobs.stream.settings import StreamSettings
from switchyard.state_handoff.control.lifecycle import Status


def _decisions(**given) -> LagDecisions:
    return LagDecisions.of(StreamSettings(**{"caught_up_lag": 10, "falling_behind_lag": 100, "switch_back_lag": 1000,
                                             "switch_back_after": 30.0, "switch_back_hold": 120.0,
                                             "state_partitions": 1, **given}))


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
