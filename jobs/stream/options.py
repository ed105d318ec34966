"""What `switchyard stream` is asked to do (StreamOptions) and what it answers (StreamResult, or StreamFailed)."""

from __future__ import annotations

from dataclasses import dataclass, field

from switchyard.state_handoff import settings as switchyard_settings
from switchyard.state_handoff.errors import Failed, UserError

COMMAND = "switchyard stream"


@dataclass
class StreamOptions:
    until_caught_up: bool = False
    for_seconds: float | None = None
    caught_up_lag: int = 0
    falling_behind_lag: int | None = None  # default: 10 x caught_up_lag, at least 1000
    max_offsets_per_trigger: int | None = 200_000
    trigger_seconds: float = 0.0
    # The Delta side (dead letters, late, windows, state from the updates topic) at most this often: fewer,
    # larger Delta commits leave the cores to the update path; a backlog still runs batches back to back.
    tables_trigger_seconds: float = 5.0
    poll_seconds: float = 0.5
    # Switch back: offsets behind above this for `switch_back_after` seconds rebase the stream (None: never).
    # A rebase costs a pause, one batch over the backlog and a seed: worth it only for a large backlog.
    switch_back_lag: int | None = 1_000_000
    switch_back_after: float = 30.0
    # Hysteresis: after a switch back, none again until the stream has been caught up this long.
    switch_back_hold: float = 120.0
    # By cost ("cost"): only when a rebase is estimated to end sooner than the stream drains the backlog, a rebase
    # taking `rebase_fixed_s` plus the records at `rebase_records_per_s` (a 9,490,619-record switch back took 222.4 s on
    # 2 cores: benchmarks/results/burst-1e7-by-cost-spark-4.2.0.json); by lag alone ("lag"). None:
    # SWITCHYARD_SWITCH_BACK.
    switch_back_when: str | None = None
    rebase_fixed_s: float = 30.0
    rebase_records_per_s: float = 50_000.0
    requests_every_seconds: float = 1.0
    # State-store partitions of a new checkpoint (one per handoff); None: SWITCHYARD_STATE_PARTITIONS.
    state_partitions: int | None = None

    def __post_init__(self):
        if self.switch_back_when is None:
            self.switch_back_when = switchyard_settings.value("SWITCHYARD_SWITCH_BACK")
        elif self.switch_back_when not in ("cost", "lag"):
            raise UserError(f"switch_back_when must be cost or lag, not {self.switch_back_when!r}")
        if self.state_partitions is None:
            self.state_partitions = switchyard_settings.value("SWITCHYARD_STATE_PARTITIONS")
        elif self.state_partitions < 1:
            raise UserError(f"--state-partitions must be a whole number of at least 1, not {self.state_partitions}")

    @property
    def behind_threshold(self) -> int:
        return self.falling_behind_lag if self.falling_behind_lag is not None else max(10 * self.caught_up_lag, 1000)


@dataclass
class StreamResult:
    handoff_id: str
    reason: str
    switched_after_s: float | None = None
    caught_up_after_s: float | None = None
    batches: int = 0
    lag: dict[int, int] = field(default_factory=dict)
    rebases: int = 0

    def summary(self, pipeline: str) -> str:
        parts = [f"stream {pipeline} {self.handoff_id} stopped ({self.reason})", f"{self.batches} event batches"]
        if self.switched_after_s is not None:
            parts.append(f"SWITCHED after {self.switched_after_s:.1f}s")
        if self.caught_up_after_s is not None:
            parts.append(f"CAUGHT_UP after {self.caught_up_after_s:.1f}s")
        if self.rebases:
            parts.append(f"{self.rebases} rebase{'s' if self.rebases > 1 else ''}")
        parts.append(f"offsets behind: {sum(self.lag.values())}")
        return "; ".join(parts)


class StreamFailed(Failed):
    """A query of the stream failed, or the supervisor could not go on: FAILED is in the log."""
