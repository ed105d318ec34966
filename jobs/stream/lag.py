"""What the stream's lag means, decided without I/O from the lag measured at each look and the time it was
measured: CAUGHT_UP, FALLING_BEHIND and the switch back to the batch path. The monitor (jobs/stream/monitor.py)
measures, writes the log and requests the rebase; these decisions are tested over a given clock, without Spark."""

from __future__ import annotations

from dataclasses import dataclass

from switchyard.jobs.stream.settings import StreamSettings
from switchyard.state_handoff.control.lifecycle import Status


@dataclass
class LagDecisions:
    """The phase the lag puts a switched stream in, with hysteresis: caught up at or under `caught_up_lag` (its
    updates applied to `state` too), falling behind above `behind_threshold` once caught up; a switch back once the
    lag has stayed above `switch_back_lag` for `switch_back_after` seconds, and after one, none again until the
    stream has been caught up for `switch_back_hold` seconds. Times are seconds on one monotonic clock."""

    caught_up_lag: int
    behind_threshold: int
    switch_back_lag: int | None
    switch_back_after: float
    switch_back_hold: float
    last_switch_back: float | None = None  # the process's, carried from one handoff's stream to the next
    caught_up: bool = False
    caught_up_since: float | None = None
    behind_since: float | None = None

    @classmethod
    def of(cls, settings: StreamSettings, last_switch_back: float | None = None) -> LagDecisions:
        return cls(settings.caught_up_lag, settings.behind_threshold, settings.switch_back_lag,
                   settings.switch_back_after, settings.switch_back_hold, last_switch_back)

    def phase(self, now: float, behind: int, state_updates_behind: int = 0) -> Status | None:
        """CAUGHT_UP or FALLING_BEHIND when the stream enters that phase at this look, else None."""
        if not self.caught_up and behind <= self.caught_up_lag and state_updates_behind <= self.caught_up_lag:
            self.caught_up, self.caught_up_since = True, now
            return Status.CAUGHT_UP
        if self.caught_up and behind > self.behind_threshold:
            self.caught_up, self.caught_up_since = False, None
            return Status.FALLING_BEHIND
        return None

    def switch_back(self, now: float, behind: int) -> bool:
        """Whether to rebase through the batch path now; when it says so, the switch back is taken as made."""
        if self.switch_back_lag is None or behind <= self.switch_back_lag:
            self.behind_since = None
            return False
        self.behind_since = self.behind_since if self.behind_since is not None else now
        if now - self.behind_since < self.switch_back_after:
            return False
        if self.last_switch_back is not None and (self.caught_up_since is None
                                                  or now - self.caught_up_since < self.switch_back_hold):
            return False
        self.last_switch_back = now
        return True

    def behind_for(self, now: float) -> float:
        return 0.0 if self.behind_since is None else now - self.behind_since
