"""The archive as files: list, date-filter and validate the Parquet files before any Spark job reads them.

The archive's commit record says what it holds: a Parquet file is part of the archive only once the record's
"files" map names it, and every file it names is part of it, on disk or not: a named file that is gone is reported
missing, never skipped. Files on disk that it does not name are orphans of an interrupted `switchyard archive` and
never read. The record is one row of a Delta table beside the day folders (`_record`), replaced by compare-and-swap
on the table's version (state_handoff/io/delta_cas.py) and fenced by the archive's lease
(state_handoff/io/fencing.py): a run commits only on the record it planned from, and only while it holds the lease.
`_archive.json` is a copy of it written after each commit, for people and tools, never read back.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import date

import pyarrow as pa

from switchyard.state_handoff.clock import utc_now
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import delta_cas, fencing, storage

ARCHIVE_META = "_archive.json"
RECORD = "_record"  # Spark's readers skip names with a leading underscore
RECORD_SCHEMA = pa.schema([("record", pa.string()), ("committed_at", pa.timestamp("us", tz="UTC"))])
REQUIRED_COLUMNS = ("kafka_partition", "kafka_offset", "value")
_DAY_DIR = re.compile(r"^event_date=(\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class ArchiveFile:
    path: str
    day: date


@dataclass(frozen=True)
class ArchiveListing:
    """The archive's committed files with the metadata that commits them, read together once: a step that looks
    at the files and then at the offsets the metadata recorded for them asks this, not the disk again."""

    root: str
    meta: dict
    files: list[ArchiveFile]
    missing: frozenset[str] = frozenset()  # paths of files the record names that are not on disk

    def recorded_ranges(self, paths: list[str]) -> dict[str, dict[int, tuple[int, int, int]]]:
        """Per file, what the metadata recorded it holds: per partition (lowest offset, highest, records)."""
        files = self.meta["files"]
        return {path: {int(p): tuple(r) for p, r in files[storage.relative(path, self.root)].items()}
                for path in paths}


def read_listing(root: str) -> ArchiveListing:
    """The archive's committed files: every file the metadata's "files" map names, found on disk or not, with that
    metadata and which named files are missing."""
    if not storage.is_dir(root):
        raise UserError(f"no archive at {root}: run `switchyard archive` first")
    meta = archive_meta(root)
    on_disk = {f.path for f in files_on_disk(root)}
    files = [ArchiveFile(storage.join(root, name), _recorded_day(root, name)) for name in sorted(meta["files"])]
    return ArchiveListing(root, meta, files, frozenset(f.path for f in files if f.path not in on_disk))


def folder_day(name: str) -> date | None:
    """The day of a day folder's name (event_date=YYYY-MM-DD); None for any other name, a day that is no date
    (event_date=0000-12-31) or a year past four digits (event_date=+10000-01-01) included."""
    match = _DAY_DIR.match(name)
    try:
        return date.fromisoformat(match.group(1)) if match else None
    except ValueError:
        return None


def _recorded_day(root: str, name: str) -> date:
    day = folder_day(name.split("/", 1)[0]) if "/" in name else None
    if day is None:
        raise UserError(f"the archive record {record_uri(root)} names {name}, which is not in a "
                        "day folder (event_date=YYYY-MM-DD): rewrite the archive with `switchyard archive`")
    return day


def list_archive(root: str) -> list[ArchiveFile]:
    """The archive's committed files (`read_listing` without the metadata)."""
    return read_listing(root).files


def orphan_files(root: str) -> list[str]:
    """Parquet files on disk that no metadata commits: written by an archive run that died before its commit."""
    meta = read_record(root)[1]
    committed = set(meta["files"]) if meta is not None else set()
    return [f.path for f in files_on_disk(root) if storage.relative(f.path, root) not in committed]


def remove_files(paths: list[str]) -> None:
    """Delete archive files with the checksum sidecars Hadoop's local file system writes beside them."""
    for path in paths:
        folder, name = path.rsplit("/", 1)
        storage.delete(path)
        storage.delete(f"{folder}/.{name}.crc")


def files_on_disk(root: str) -> list[ArchiveFile]:
    """Every Parquet file in the day folders, committed or not."""
    files = []
    for entry in storage.list_dir(root):
        day = folder_day(entry)
        if day is None:
            continue
        for name in storage.list_dir(storage.join(root, entry)):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                files.append(ArchiveFile(storage.join(root, entry, name), day))
    return files


def unreadable(path: str) -> str | None:
    """None when the file's footer reads as Parquet; else why not."""
    import pyarrow.parquet as pq

    try:
        with storage.open_input(path) as source:
            parquet = pq.ParquetFile(source)
            if parquet.metadata.num_rows:
                parquet.read_row_group(0, columns=["kafka_offset"] if "kafka_offset" in parquet.schema_arrow.names
                                       else None)
    except Exception as err:  # pyarrow raises several types for truncated or foreign files
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160]}" if str(err) else type(err).__name__
    return None


def missing_column(path: str) -> str | None:
    """The first of REQUIRED_COLUMNS the file's schema lacks; None when it has them all."""
    import pyarrow.parquet as pq

    with storage.open_input(path) as source:
        names = pq.read_schema(source).names
    return next((c for c in REQUIRED_COLUMNS if c not in names), None)


def offset_ranges(path: str) -> dict[int, tuple[int, int, int]]:
    """Per Kafka partition in one archive file: (lowest offset, highest offset, records), from two columns."""
    import pyarrow.parquet as pq

    with storage.open_input(path) as source:
        # ParquetFile, not read_table's dataset scan: see delta_cas.read on the aborts its threads leave at exit
        table = pq.ParquetFile(source).read(columns=["kafka_partition", "kafka_offset"], use_threads=False)
    grouped = table.group_by("kafka_partition").aggregate(
        [("kafka_offset", "min"), ("kafka_offset", "max"), ("kafka_offset", "count")])
    return {int(p): (int(lo), int(hi), int(n)) for p, lo, hi, n in zip(
        *(grouped.column(c).to_pylist() for c in
          ("kafka_partition", "kafka_offset_min", "kafka_offset_max", "kafka_offset_count")))}


def file_ranges(root: str, paths: list[str]) -> dict[str, dict[str, list[int]]]:
    """Entries of the archive metadata's "files" map: per file (relative to the root), per partition
    [from, to, records].

    Recorded when the files are written, so a file that later becomes unreadable still says what it held."""
    return {storage.relative(path, root): {str(p): list(r) for p, r in sorted(offset_ranges(path).items())}
            for path in paths}


def record_uri(root: str) -> str:
    """The Delta table holding the archive at `root`'s record."""
    return storage.join(root, RECORD)


def read_record(root: str) -> tuple[int, dict | None]:
    """The archive's record (None when nothing was ever committed) and the version of its table it was read at,
    which `commit_record` expects (0 when there is no table yet)."""
    from deltalake import DeltaTable

    uri = record_uri(root)
    if not storage.exists(storage.join(uri, "_delta_log")):
        return 0, None
    try:
        table = DeltaTable(uri, storage_options=storage.delta_options(uri))
        rows = delta_cas.read(table, ["record"]).column("record").to_pylist()
    except Exception as err:  # noqa: BLE001 - a damaged file of the record's table, or a store that fails
        cause = str(err).splitlines()[0][:300] if str(err) else type(err).__name__
        raise UserError(f"the archive record {uri} cannot be read ({cause}): if the store answers, a file of it "
                        "is damaged: restore the record from a backup, or archive the topic again into a fresh "
                        "--warehouse") from err
    return table.version(), json.loads(rows[-1]) if rows else None


def commit_record(root: str, meta: dict, expected: int) -> bool:
    """Commit `meta` as the archive's record if its table is still at version `expected` (what `read_record` said);
    False when another commit came first. LeaseLost when this process's archive lease is lost or fenced out."""
    uri = record_uri(root)
    table = delta_cas.open_or_create(uri, RECORD_SCHEMA, name="archive_record",
                                     description="the archive's commit record: one row, replaced by compare-and-swap")
    if table.version() != expected:
        return False
    rows = pa.Table.from_pylist([{"record": json.dumps(meta), "committed_at": utc_now()}], RECORD_SCHEMA)
    if not delta_cas.commit_next(table, rows, mode="overwrite", properties=fencing.properties(table, [])):
        return False
    storage.write_text_atomic(_meta_path(root), json.dumps(meta))
    return True


def write_archive_meta(root: str, meta: dict) -> None:
    """Commit `meta` as the archive's record whatever it was (an archive made outside `switchyard archive`: the
    benchmarks' synthetic archives, tests). A record that names no files names none; one that names no runs gets the
    one run over [first, cut) that holds its files, as a single `switchyard archive` run would have recorded."""
    files = meta.get("files", {})
    runs = meta["runs"] if "runs" in meta else [_one_run(meta, files)] if meta.get("cut") else []
    record = {**meta, "files": files, "runs": runs}
    while not commit_record(root, record, read_record(root)[0]):
        pass


def _one_run(meta: dict, files: dict) -> dict:
    from switchyard.state_handoff.io.archive_record import file_totals

    cut = {int(p): int(o) for p, o in meta["cut"].items()}
    first = {int(p): int(o) for p, o in meta.get("first", {}).items()}
    held = file_totals(files)
    return {"from": {str(p): first.get(p, 0) for p in sorted(cut)}, "to": {str(p): o for p, o in sorted(cut.items())},
            "records": {str(p): held.get(p, 0) for p in sorted(cut)}}


def _meta_path(root: str) -> str:
    return storage.join(root, ARCHIVE_META)


def archive_meta(root: str) -> dict:
    meta = read_record(root)[1]
    if meta is None:
        raise UserError(f"no archive metadata at {root}: run `switchyard archive` first")
    return meta
