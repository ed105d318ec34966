"""The archive as files: list, date-filter and validate the Parquet files before any Spark job reads them."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from datetime import date

from state_handoff.errors import UserError

ARCHIVE_META = "_archive.json"
REQUIRED_COLUMNS = ("kafka_partition", "kafka_offset", "value")
_DAY_DIR = re.compile(r"^event_date=(\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True)
class ArchiveFile:
    path: str
    day: date


def list_archive(root: str) -> list[ArchiveFile]:
    if not os.path.isdir(root):
        raise UserError(f"no archive at {root}: run `switchyard archive` first")
    files = []
    for entry in sorted(os.listdir(root)):
        match = _DAY_DIR.match(entry)
        if not match:
            continue
        day = date.fromisoformat(match.group(1))
        for name in sorted(os.listdir(os.path.join(root, entry))):
            if name.endswith(".parquet") and not name.startswith((".", "_")):
                files.append(ArchiveFile(os.path.join(root, entry, name), day))
    return files


def unreadable(path: str) -> str | None:
    """None when the file's footer reads as Parquet; else why not."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.read_metadata(path)
        if metadata.num_rows:
            pq.ParquetFile(path).read_row_group(0, columns=["kafka_offset"] if "kafka_offset" in metadata.schema.names else None)
    except Exception as err:  # pyarrow raises several types for truncated or foreign files
        return f"{type(err).__name__}: {str(err).splitlines()[0][:160]}" if str(err) else type(err).__name__
    return None


def missing_column(path: str) -> str | None:
    import pyarrow.parquet as pq

    names = pq.read_schema(path).names
    return next((c for c in REQUIRED_COLUMNS if c not in names), None)


def write_archive_meta(root: str, meta: dict) -> None:
    """Which topic and cut the archive holds; Spark's readers skip files named with a leading underscore."""
    with open(os.path.join(root, ARCHIVE_META), "w") as fh:
        json.dump(meta, fh)


def archive_meta(root: str) -> dict:
    path = os.path.join(root, ARCHIVE_META)
    if not os.path.exists(path):
        raise UserError(f"no archive metadata at {path}: run `switchyard archive` first")
    with open(path) as fh:
        return json.load(fh)
