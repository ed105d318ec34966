"""The one place that knows table paths: `<warehouse>/<pipeline>/<table>`. A pipeline's paths are given once its
tables are checked to hold this switchyard's format (state_handoff/format.py): another format is refused before
anything reads or writes them."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from switchyard.state_handoff import format as table_format

TABLES = ("archive", "tiles", "backlog", "state", "windows", "window_state", "handoffs", "dead_letter", "late",
          "stream_batches", "leases", "archive_lease", "pipeline_settings", "redeploy_tiles",
          "redeploy_dead_letter", "format_version")


@dataclass(frozen=True)
class Tables:
    warehouse: str
    pipeline: str
    lease_table: str = "leases"  # which lease these tables' writer holds (see archive_writer)

    @property
    def root(self) -> str:
        """The pipeline's folder; UserError in one line when its tables hold another format (checked once per
        process)."""
        root = self._root
        table_format.check(f"{root}/format_version", f"{root}/handoffs", self.warehouse, self.pipeline)
        return root

    @property
    def _root(self) -> str:
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
    def backlog(self) -> str:
        """Every tile merged into one row per key, when the state holds more (jobs/backfill/backlog.py)."""
        return self.path("backlog")

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
        """The stream's resume state: one row per committed batch (state_handoff/stream/progress.py)."""
        return self.path("stream_batches")

    @property
    def pipeline_settings(self) -> str:
        """The settings every process of the pipeline must share, recorded by its first run
        (state_handoff/control/pins.py)."""
        return self.path("pipeline_settings")

    @property
    def format_version(self) -> str:
        """The format the pipeline's tables hold, recorded with its handoff log (state_handoff/format.py)."""
        return self.path("format_version")

    @property
    def leases(self) -> str:
        """The lease its writer holds: the pipeline's own, or the archive's (archive_writer)."""
        return self.path(self.lease_table)

    def archive_writer(self) -> "Tables":
        """These tables under the archive's own lease: one archive run at a time, and beside a live stream, a backfill
        or a handoff, which read only what the archive's record has committed, never the files a run is writing."""
        return replace(self, lease_table="archive_lease")

    @property
    def stream_dir(self) -> str:
        """Checkpoints and progress of the streaming job (not a table)."""
        return f"{self.root}/_stream"
