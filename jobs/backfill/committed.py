"""The end of a commit: the archive counted against what the tiles hold, BACKFILL_COMMITTED appended with the
boundary and the accounting (isBacklog ends here), and the vacuums of what the commit replaced."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from datetime import datetime

from pyspark.sql import DataFrame, SparkSession

from switchyard.jobs.backfill.accounting import archive_accounting
from switchyard.jobs.backfill.read import skipped_gaps
from switchyard.jobs.backfill.tiled import TiledBacklog
from switchyard.jobs.backfill.tiles import BackfillResult
from switchyard.jobs.log import warnings_to
from switchyard.state_handoff import faults
from switchyard.state_handoff.control import handoff_log, kept_versions
from switchyard.state_handoff.control.details import BackfillCommitted
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io import delta_upkeep, storage
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Counted:
    """The archive counted at the commit: per partition read, well-formed and dead-lettered; the records not yet in
    the tiles; the keys of the state; what each skipped file holds."""

    accounting: dict
    missing: dict
    keys: int
    gaps: list[dict]

    @property
    def complete(self) -> bool:
        """Every archived record is in the tiles, and no skipped file lies below the boundary."""
        return not self.missing and not any(g["below_boundary"] for g in self.gaps)


def count_backlog(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiled: TiledBacklog, state: DataFrame,
                  boundary: dict[int, int], runs_count: bool) -> Counted:
    """The archive's accounting, the keys of `state` (kept on local disk: released here) and the skipped files'
    gaps below `boundary`. `runs_count`: the tiles run's own count serves when it covered exactly the archive's
    readable files (a backfill of every day since nothing changed): the archive read a third time would give the
    same figures."""
    run, times = tiled.run, tiled.times
    whole = ({p: dict(a) for p, a in run.accounting.items()}
             if runs_count and run.files and run.accounting and run.files == sorted(f.path for f in tiled.readable)
             else archive_accounting(spark, pipeline, tables, tiled.archive, tiled.readable, tiled.first, tiled.last))
    times.end("boundary_and_accounting")
    missing = {p: a["read"] - a["well_formed"] - a["dead_lettered"] for p, a in whole.items()
               if a["read"] != a["well_formed"] + a["dead_lettered"]}
    keys = state.count()
    state.unpersist()
    return Counted(whole, missing, keys, skipped_gaps(tiled.archive, tiled.unreadable, boundary))


@dataclass(frozen=True)
class Committed:
    """What a commit wrote, for its log entry: the state's version, the backlog watermark, the boundary per
    partition, the tiles' merge for the next commit to start from (backlog.record), the count; a Kafka tail's range
    and a rebase's cut when it had them."""

    state_version: int
    watermark: datetime | None
    boundary: dict[int, int]
    merge: dict | None
    counted: Counted
    kafka_tail: dict | None = None
    at_cut: dict | None = None


def record_commit(tables: Tables, pipeline: Pipeline, tiled: TiledBacklog, written: Committed,
                  out=logger.info) -> BackfillResult:
    """BACKFILL_COMMITTED appended for what was written, then the vacuums; returns the tiles run, committed."""
    run, counted = tiled.run, written.counted
    tiled.times.end("keys_and_gaps")
    result = replace(run, keys=counted.keys, state_version=written.state_version, backlog_watermark=written.watermark,
                     boundary=written.boundary, seconds=run.seconds + time.monotonic() - tiled.started,
                     kafka_tail=written.kafka_tail if written.kafka_tail is not None else run.kafka_tail)
    faults.reach("backfill.after_state")
    handoff_log.append(tables, run.handoff_id, Status.BACKFILL_COMMITTED,
                       state_version=written.state_version, backlog_watermark=written.watermark,
                       details=BackfillCommitted(
                           from_=str(run.first_day), to=str(run.last_day), boundary=written.boundary,
                           records_read=run.records_read, well_formed=run.well_formed,
                           dead_lettered=run.dead_lettered, keys=counted.keys, accounting=run.accounting,
                           archive_accounting=counted.accounting, complete=counted.complete,
                           records_not_backfilled=counted.missing, unreadable_files=tiled.unreadable,
                           skipped_files=run.skipped_files, gaps=counted.gaps,
                           tiled_files=[] if counted.missing else sorted(
                               storage.relative(f.path, tables.archive) for f in tiled.readable),
                           duration_s=round(result.seconds, 3), tiles_s=run.tiles_s, commit_s=tiled.times.parts,
                           backlog=written.merge, **definition.as_details(pipeline),
                           kafka_tail=written.kafka_tail, at_cut=written.at_cut))
    _vacuum(tables)
    _warn(counted, out)
    return result


def _vacuum(tables: Tables) -> None:
    """What this commit and earlier backfills replaced, over an hour ago; of `tiles`, the previous definition's kept,
    and of `state`, the seeds'."""
    committed = PipelineView.read(tables)  # the log with this commit's entry
    delta_upkeep.vacuum(tables.tiles, keep_versions=kept_versions.kept_tiles_versions(committed))
    for path in (tables.windows, tables.window_state, tables.dead_letter, tables.backlog):
        delta_upkeep.vacuum(path)
    delta_upkeep.vacuum(tables.state, keep_versions=kept_versions.kept_state_versions(committed))


def _warn(counted: Counted, out) -> None:
    warn = warnings_to(out)
    if counted.missing:
        warn(f"  note: archived records not yet in the tiles, per partition: {counted.missing}; "
             "backfill the remaining days before the handoff (`switchyard backfill` without --from and --to covers "
             "every archived day)")
    for g in (g for g in counted.gaps if g["below_boundary"]):
        held = "offsets not recorded" if g["from"] is None else f"p{g['partition']}:{g['from']}..{g['to']}"
        warn(f"  note: skipped file {g['file']} holds {held} below the boundary; the handoff will refuse "
             "until the file is restored or rewritten and the backfill rerun")
