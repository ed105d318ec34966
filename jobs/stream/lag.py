"""What the stream's lag means, decided without I/O from the lag measured at each look and the time it was
measured: CAUGHT_UP, FALLING_BEHIND and the switch back to the batch path. The monitor (jobs/stream/monitor.py)
measures, writes the log and requests the rebase; these decisions are tested over a given clock, without Spark.

A switch back costs a rebase: the pause, a batch over the records behind, the commit at the cut and the stream's
start again. Decided by cost (the default, SWITCHYARD_SWITCH_BACK=cost), it is made only when that is estimated to
end sooner than the stream would drain the same backlog at the rate it is measured to gain on its input; decided by
lag alone (`lag`), whenever the lag has stayed high long enough."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from switchyard.jobs.stream.options import StreamOptions
from switchyard.state_handoff.control.lifecycle import Status

ARRIVAL_WINDOW_S = 5.0  # the input's rate is measured over this much of the latest looks: a burst just ended is past


@dataclass(frozen=True)
class SwitchBackEstimate:
    """What a switch back is decided on: the records `behind`, the rates measured while behind (records processed
    per second between the batches committed while behind, from the second on; arriving per second over the last
    ARRIVAL_WINDOW_S), the seconds the
    stream would take to drain the backlog at their difference (infinite when it does not gain on its input), and
    the seconds a rebase would take (its fixed cost, plus the records at the batch path's rate)."""

    behind: int
    processed_per_s: float
    arriving_per_s: float
    stream_s: float
    rebase_s: float

    @property
    def rebase_sooner(self) -> bool:
        return self.rebase_s < self.stream_s

    def as_details(self) -> dict:
        return {"behind": self.behind, "processed_per_s": round(self.processed_per_s, 1),
                "arriving_per_s": round(self.arriving_per_s, 1),
                "stream_s": None if math.isinf(self.stream_s) else round(self.stream_s, 1),
                "rebase_s": round(self.rebase_s, 1)}

    def describe(self) -> str:
        drains = ("never drains them" if math.isinf(self.stream_s) else
                  f"drains them in ~{self.stream_s:.0f}s")
        return (f"{self.behind:,} offsets behind: the stream {drains} (processing {self.processed_per_s:,.0f}/s, "
                f"{self.arriving_per_s:,.0f}/s arriving), a rebase would take ~{self.rebase_s:.0f}s")


@dataclass
class LagDecisions:
    """The phase the lag puts a switched stream in, with hysteresis: caught up at or under `caught_up_lag` (its
    updates applied to `state` too), falling behind above `behind_threshold` once caught up; a switch back once the
    lag has stayed above `switch_back_lag` for `switch_back_after` seconds, and after one, none again until the
    stream has been caught up for `switch_back_hold` seconds; by cost (`switch_back_when`), only once a rebase is
    estimated to end sooner (`estimate`). Times are seconds on one monotonic clock."""

    caught_up_lag: int
    behind_threshold: int
    switch_back_lag: int | None
    switch_back_after: float
    switch_back_hold: float
    last_switch_back: float | None = None  # the process's, carried from one handoff's stream to the next
    caught_up: bool = False
    caught_up_since: float | None = None
    behind_since: float | None = None
    switch_back_when: str = "cost"  # or "lag"
    rebase_fixed_s: float = 30.0
    rebase_records_per_s: float = 50_000.0
    estimate: SwitchBackEstimate | None = None  # the last one made
    declined: SwitchBackEstimate | None = None  # the first estimate that held a switch back off while behind, to tell
    _declined_once: bool = False
    _first: tuple[float, int, int] | None = None  # the first look while behind: (time, latest offsets, behind)
    _advances: int = 0  # batches seen committed while behind
    _advanced: list[tuple[float, int]] = field(default_factory=list)  # (time, processed) at the 2nd and last advance
    _recent: list[tuple[float, int, int]] = field(default_factory=list)  # the looks of the last ARRIVAL_WINDOW_S

    @classmethod
    def of(cls, settings: StreamOptions, last_switch_back: float | None = None) -> LagDecisions:
        return cls(settings.caught_up_lag, settings.behind_threshold, settings.switch_back_lag,
                   settings.switch_back_after, settings.switch_back_hold, last_switch_back,
                   switch_back_when=settings.switch_back_when, rebase_fixed_s=settings.rebase_fixed_s,
                   rebase_records_per_s=settings.rebase_records_per_s)

    def phase(self, now: float, behind: int, state_updates_behind: int = 0) -> Status | None:
        """CAUGHT_UP or FALLING_BEHIND when the stream enters that phase at this look, else None."""
        if not self.caught_up and behind <= self.caught_up_lag and state_updates_behind <= self.caught_up_lag:
            self.caught_up, self.caught_up_since = True, now
            return Status.CAUGHT_UP
        if self.caught_up and behind > self.behind_threshold:
            self.caught_up, self.caught_up_since = False, None
            return Status.FALLING_BEHIND
        return None

    def switch_back(self, now: float, behind: int, latest: int | None = None) -> bool:
        """Whether to rebase through the batch path now; when it says so, the switch back is taken as made.
        `latest`: the input's latest offsets summed over its partitions, at this look (what the rates are measured
        from; a decision by cost makes none before three batches have committed while behind)."""
        if self.switch_back_lag is None or behind <= self.switch_back_lag:
            self.behind_since, self._first, self._recent, self._declined_once = None, None, [], False
            self._advanced, self._advances = [], 0
            return False
        self.behind_since = self.behind_since if self.behind_since is not None else now
        if latest is not None:
            self._look(now, latest, behind)
        if now - self.behind_since < self.switch_back_after:
            return False
        if self.last_switch_back is not None and (self.caught_up_since is None
                                                  or now - self.caught_up_since < self.switch_back_hold):
            return False
        if self.switch_back_when == "cost":
            self.estimate = self._estimated(behind)
            if self.estimate is None or not self.estimate.rebase_sooner:
                if self.estimate is not None and not self._declined_once:
                    self.declined, self._declined_once = self.estimate, True
                return False
        self.last_switch_back = now
        return True

    def _look(self, now: float, latest: int, behind: int) -> None:
        processed = latest - behind
        before = self._recent[-1][1] - self._recent[-1][2] if self._recent else None
        if before is not None and processed > before:  # a batch committed since the last look
            self._advances += 1
            anchor = self._advanced[0] if self._advances > 2 else (now, processed)  # from the 2nd on
            self._advanced = [anchor, (now, processed)]
        self._first = self._first or (now, latest, behind)
        self._recent = [look for look in self._recent if now - look[0] <= ARRIVAL_WINDOW_S] + [(now, latest, behind)]

    def _estimated(self, behind: int) -> SwitchBackEstimate | None:
        # The stream's rate is measured between batches it committed while behind, from the second to the last, once
        # a third has: the time before the first holds the batch that was running when the backlog came, and the
        # one up to the second holds the start of the first batch over the backlog, not the stream's rate.
        if self._first is None or not self._recent or self._advances < 3:
            return None
        (t0, processed0), (t_last, processed_last) = self._advanced
        (t1, latest1, _), (ta, latest_a, _), (_, latest0, _) = self._recent[-1], self._recent[0], self._first
        if t_last - t0 < 1.0:
            return None
        processed = (processed_last - processed0) / (t_last - t0)
        arriving = (latest1 - latest_a) / (t1 - ta) if t1 - ta >= 1.0 else (latest1 - latest0) / (t1 - self._first[0])
        gain = processed - arriving
        return SwitchBackEstimate(behind, processed, arriving, behind / gain if gain > 0 else math.inf,
                                  self.rebase_fixed_s + behind / self.rebase_records_per_s)

    def behind_for(self, now: float) -> float:
        return 0.0 if self.behind_since is None else now - self.behind_since
