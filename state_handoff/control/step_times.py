"""Where a long step's seconds went, by named part, for the log entry that closes it."""

from __future__ import annotations

import time


class StepTimes:
    """Seconds spent in each named part of a step since a start; a part ended twice adds up."""

    def __init__(self, started: float | None = None):
        self.mark = time.monotonic() if started is None else started
        self.parts: dict[str, float] = {}

    def end(self, part: str) -> None:
        now = time.monotonic()
        self.parts[part] = round(self.parts.get(part, 0.0) + now - self.mark, 3)
        self.mark = now

    def describe(self) -> str:
        return ", ".join(f"{k} {v:.1f}s" for k, v in self.parts.items())
