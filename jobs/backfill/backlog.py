"""The backlog's keyed partials: every tile merged into one row per key, incrementally when the tiles only grew.

A nightly backfill tiles one new day. Merging every tile of the archive into the state again would cost what the
archive holds, not what the day holds. So each commit records where its merge of the tiles alone stands (no Kafka
tail, no records past the archive's cut: those are folded in on top, every time) and which tiles it covered:

- `state` at the commit's own version, when the state is the tiles' merge and nothing else (a plain backfill);
- `backlog`, a table written for this purpose, after a rebase at a cut, whose state also holds the Kafka range
  past the archive.

A backfill that folds in a Kafka tail records none (the tail joins the same aggregation): the commit after it
merges every tile.

The next commit starts from that merge when every tile file it covered is still in `tiles` (Delta keeps files it
replaced out of the snapshot: a day tiled again removes its old files). It then reads only the files added since,
which a day's tiles run wrote, and merges them in: the cost follows the new days, plus one row per key; a rebase
that tiled no day (a switch back, say) keeps `backlog` as the earlier commit left it and merges nothing. A day tiled
again over itself, a record at another version, or a merge whose files are gone (vacuumed) make the commit merge
every tile, as the first one did.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, date, datetime

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import state_from_partials
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Merged:
    """The tiles' merge this commit starts from, and what it adds."""

    table: str                 # "state" or "backlog": where the earlier merge is
    version: int               # that table's version holding it
    new_days: tuple[date, ...]  # the days whose tile files were added since it
    windows: dict | None = None  # the `windows` and `window_state` versions it wrote from the tiles alone

    @property
    def in_backlog_as_is(self) -> bool:
        """The merge is in `backlog` and no day was tiled since: that version is this commit's merge already."""
        return self.table == "backlog" and not self.new_days


def _delta(path: str, version: int | None = None):
    from deltalake import DeltaTable

    options = storage.delta_options(path)
    return (DeltaTable(path, storage_options=options) if version is None
            else DeltaTable(path, version=version, storage_options=options))


def table_version(path: str) -> int | None:
    """The table's latest version, from its log through delta-rs (Spark's `history` is a job and a snapshot; None:
    no table)."""
    if not storage.exists(storage.join(path, "_delta_log")):
        return None
    return _delta(path).version()


def _tile_files(path: str, version: int | None = None) -> dict[str, date]:
    """Each data file of `tiles` (at a version) with its day."""
    actions = pa.table(_delta(path, version).get_add_actions(flatten=True))
    return dict(zip(actions.column("path").to_pylist(), actions.column("partition.event_date").to_pylist()))


def tile_files(path: str, version: int | None) -> dict[str, date]:
    """Each data file of `tiles` at `version` with its day (None: no table, no files)."""
    return {} if version is None else _tile_files(path, version)


def _readable(path: str, version: int) -> bool:
    """The table at that version can be read: its log holds the version and no data file of it was vacuumed."""
    try:
        table = _delta(path, version)
    except Exception:  # the version's log entry is gone (log retention)
        return False
    return all(storage.exists(uri) for uri in table.file_uris())


def earlier_merge(pipeline: Pipeline, tables: Tables, now: dict[str, date]) -> tuple[Merged | None, str]:
    """The merge the latest committed backfill recorded, when the tiles only grew since to `now` (the files of the
    `tiles` version this commit merges: tile_files); else None and why."""
    committed = handoff_log.latest(tables, Status.BACKFILL_COMMITTED)
    record = details.of(committed).backlog if committed is not None else None
    if not record:
        return None, "no earlier commit recorded its merge of the tiles"
    if record.get("columns") != _columns(pipeline):
        return None, "the pipeline's keys or aggregations changed since the earlier merge"
    try:
        then = _tile_files(tables.tiles, record["tiles_version"])
    except Exception:  # the version's log entry is gone (log retention)
        return None, f"tiles version {record['tiles_version']} is no longer in the table's log"
    retiled = sorted({day for f, day in then.items() if f not in now})
    if retiled:
        return None, f"days merged before were tiled again ({retiled[0]}{' ...' if len(retiled) > 1 else ''})"
    if not _readable(tables.path(record["table"]), record["version"]):
        return None, f"the earlier merge ({record['table']} version {record['version']}) is no longer readable"
    added = tuple(sorted({day for f, day in now.items() if f not in then}))
    return Merged(record["table"], record["version"], added, record.get("windows")), ""


def merged_tiles(spark: SparkSession, pipeline: Pipeline, tables: Tables, tiles: DataFrame,
                 earlier: tuple[Merged | None, str], out=logger.info, also: DataFrame | None = None,
                 by_key: bool = False) -> DataFrame:
    """One row per key over every tile: the `earlier` merge (earlier_merge's) with the days tiled since, or every
    tile; `also`: more keyed partials merged in the same aggregation (a Kafka tail's tiles). `by_key`: `tiles` are
    partitioned and sorted by key as the tiles run made them, so every tile is merged in place first and `also` joins
    the merged rows (one row per key) rather than the tiles."""
    earlier, why = earlier
    columns = _columns(pipeline)
    if earlier is None:
        out(f"  merging every tile: {why}")
        partials = tiles.select(*columns)
        if by_key:
            partials = state_from_partials(pipeline, partials).select(*columns)
            if also is None:
                return partials
    else:
        out(f"  merging {len(earlier.new_days)} newly tiled day(s) into the earlier merge "
            f"({earlier.table} version {earlier.version})")
        base = spark.read.format("delta").option("versionAsOf", earlier.version).load(tables.path(earlier.table))
        added = tiles.where(F.col("event_date").isin(list(earlier.new_days))) if earlier.new_days else tiles.limit(0)
        partials = base.select(*columns).unionByName(added.select(*columns))
    if also is not None:
        partials = partials.unionByName(also.select(*columns))
    return state_from_partials(pipeline, partials)


def _columns(pipeline: Pipeline) -> list[str]:
    return [*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True)]


def record(pipeline: Pipeline, table: str, version: int, tiles_version: int | None,
           windows: dict | None = None) -> dict | None:
    """What BACKFILL_COMMITTED records of this commit's merge (its `backlog`), for the next one (None without
    tiles)."""
    return None if tiles_version is None else {"table": table, "version": version, "tiles_version": tiles_version,
                                               "columns": _columns(pipeline),
                                               **({"windows": windows} if windows else {})}


def window_versions(tables: Tables) -> dict[str, int | None]:
    """`windows` and `window_state` at their latest versions, as a commit that wrote them from tiles records."""
    return {name: table_version(tables.path(name)) for name in ("windows", "window_state")}


def windows_to_redo(pipeline: Pipeline, tables: Tables, earlier: Merged | None) -> datetime | None:
    """The start from which windows are made again from the tiles, the earlier ones kept below it: the first
    window a newly tiled day's panes lie in. None (make every window again) unless the earlier commit wrote the
    windows from its tiles alone, their files are unchanged since (a stream's MERGE replaces files), and no
    closed window starts at or past it (a day tiled before the windows closed ones)."""
    if earlier is None or not earlier.windows or not earlier.new_days:
        return None
    for name, version in earlier.windows.items():
        path = tables.path(name)
        if version is None or table_version(path) is None:
            return None
        if set(_delta(path, version).file_uris()) != set(_delta(path).file_uris()):
            return None
    day = earlier.new_days[0]
    redo = datetime(day.year, day.month, day.day, tzinfo=UTC) - (pipeline.windows.per_record - 1) * \
        pipeline.windows.slide
    closed = pa.table(_delta(tables.windows).get_add_actions(flatten=True))
    newest = [t for t in closed.column("max.window_start").to_pylist() if t is not None] \
        if "max.window_start" in closed.column_names else []
    if closed.num_rows and len(newest) < closed.num_rows:
        return None  # a file without statistics: its windows' starts are not known without reading it
    return None if newest and max(newest) >= redo else redo
