"""Named lap times: where a long step's seconds went, for the log entry that closes it."""

from __future__ import annotations

import time


class Laps:
    """Named lap times since a start, in seconds; a name lapped twice adds up."""

    def __init__(self, started: float | None = None):
        self.mark = time.monotonic() if started is None else started
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self.mark, 3)
        self.mark = now

    def describe(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.laps.items())
