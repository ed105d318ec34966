"""What a commit reads once, before anything is merged: the archive's listing and which of its files read, the tiles
run it closes, the `tiles` version it merges with that version's files, the earlier merge it may start from, and the
tiles themselves. The commit's steps are given these; none of them reads them again."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import date

from pyspark.sql import DataFrame, SparkSession

from switchyard.jobs.backfill import backlog
from switchyard.jobs.backfill.read import bad_file, file_problem, resolve_range
from switchyard.jobs.backfill.tiles import BackfillResult, KeptTiles, failure_logged, pending_tiles_run
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.step_times import StepTimes
from switchyard.state_handoff.io.archive_files import ArchiveFile, ArchiveListing
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables


@dataclass(frozen=True)
class TiledBacklog:
    """The backlog as the tiles hold it, for one commit."""

    run: BackfillResult  # the tiles run this commit closes: its handoff id, days and accounting
    archive: ArchiveListing
    first: date  # the archive's first and last day
    last: date
    readable: list[ArchiveFile]  # the archive's files that read (a file the tiles run just read is not opened again)
    tiles_version: int | None
    tiles: DataFrame  # the tiles at that version: the table's, or those a tiles run kept on local disk
    by_key: bool  # `tiles` are the kept ones, partitioned and sorted by key
    earlier: tuple[backlog.Merged | None, str]  # the merge it may start from, or None and why not (earlier_merge)
    started: float  # when the commit began (time.monotonic)
    times: StepTimes = field(compare=False)  # where its seconds go: BACKFILL_COMMITTED's commit_s

    @property
    def unreadable(self) -> list[str]:
        """The archive's files that did not read."""
        return [f.path for f in self.archive.files if f not in self.readable]


def read_backlog(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiles_run: BackfillResult | None = None,
                 kept: KeptTiles | None = None) -> TiledBacklog:
    """The backlog a commit merges: `tiles_run`'s, else the one a separate step left pending, else a new handoff id's
    over the tiles as they are. A committed file gone bad since the tiles run (or a rebase's tiles made long ago) is
    refused (FAILED logged), never skipped: only files that run skipped under --skip-bad-files leave the recorded gap
    the handoff refuses. `kept`: the tiles this process's tiles run kept, read instead of the table when they are all
    of it."""
    started = time.monotonic()
    first, last, archive, _ = resolve_range(tables, None, None)
    # the files this process's tiles run read a moment ago are not opened again; a tiles run loaded from its record
    # (a separate step, maybe hours ago) checks every file again
    just_read = set(tiles_run.files) if tiles_run is not None else set()
    problems = {f.path: file_problem(archive, f) for f in archive.files if f.path not in just_read}
    readable = [f for f in archive.files if problems.get(f.path) is None]
    run = tiles_run or pending_tiles_run(tables) or BackfillResult(handoff_log.new_handoff_id(), first, last)
    with failure_logged(spark, tables, run.handoff_id):
        bad = next((f for f in archive.files if problems.get(f.path) and f.path not in run.skipped_files), None)
        if bad is not None:
            raise bad_file(archive, bad, problems[bad.path])
        tiles_version = backlog.table_version(tables.tiles)  # the tiles this commit merges, read at that version
        files = backlog.tile_files(tables.tiles, tiles_version)
        by_key = kept is not None and kept.covers(tiles_version, set(files.values()))
        if by_key:  # this process's tiles run wrote every tile the table holds: read from local disk, by key
            tiles = kept.frame
        else:
            reader = spark.read.format("delta")
            if tiles_version is not None:
                reader = reader.option("versionAsOf", tiles_version)
            tiles = reader.load(tables.tiles)
        earlier = backlog.earlier_merge(pipeline, tables, files)
    return TiledBacklog(run, archive, first, last, readable, tiles_version, tiles, by_key, earlier, started,
                        StepTimes(started))
