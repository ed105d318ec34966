"""The one place that knows table paths: `<warehouse>/<pipeline>/<table>`."""

from __future__ import annotations

import os
from dataclasses import dataclass

TABLES = ("archive", "tiles", "state", "windows", "window_state", "handoffs", "dead_letter", "late",
          "stream_batches", "leases")


@dataclass(frozen=True)
class Tables:
    warehouse: str
    pipeline: str

    @property
    def root(self) -> str:
        return os.path.join(os.path.abspath(self.warehouse), self.pipeline) if "://" not in self.warehouse \
            else f"{self.warehouse.rstrip('/')}/{self.pipeline}"

    def path(self, table: str) -> str:
        assert table in TABLES, table
        return f"{self.root}/{table}"

    @property
    def archive(self) -> str:
        return self.path("archive")

    @property
    def tiles(self) -> str:
        return self.path("tiles")

    @property
    def state(self) -> str:
        return self.path("state")

    @property
    def windows(self) -> str:
        return self.path("windows")

    @property
    def window_state(self) -> str:
        return self.path("window_state")

    @property
    def handoffs(self) -> str:
        return self.path("handoffs")

    @property
    def dead_letter(self) -> str:
        return self.path("dead_letter")

    @property
    def late(self) -> str:
        return self.path("late")

    @property
    def stream_batches(self) -> str:
        """The stream's resume state: one row per committed batch (state_handoff/stream_progress.py)."""
        return self.path("stream_batches")

    @property
    def leases(self) -> str:
        """Who owns the pipeline now: one row, the lease (state_handoff/lease.py)."""
        return self.path("leases")

    @property
    def stream_dir(self) -> str:
        """Checkpoints and progress of the streaming job (not a table)."""
        return f"{self.root}/_stream"
