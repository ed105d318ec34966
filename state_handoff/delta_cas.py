"""Compare-and-swap on a Delta table's version, through delta-rs: a commit lands at exactly the version after the
one its writer read, or not at all, so the writer's decision was made on the latest state of the table."""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from state_handoff.storage import delta_options


def open_or_create(uri: str, schema: pa.Schema, *, name: str, description: str,
                   configuration: dict[str, str] | None = None) -> DeltaTable:
    """The table at `uri`; created empty at version 0 on first use, so every later commit's version is known
    before it is written."""
    options = delta_options(uri)
    try:
        return DeltaTable(uri, storage_options=options)
    except TableNotFoundError:
        pass
    try:
        return DeltaTable.create(uri, schema, mode="ignore", name=name, description=description,
                                 configuration=configuration, storage_options=options)
    except DeltaError:
        try:
            return DeltaTable(uri, storage_options=options)  # another writer created it between our look and ours
        except TableNotFoundError:
            pass
        raise


def commit_next(table: DeltaTable, rows: pa.Table, mode: str = "append") -> bool:
    """Commit `rows` at `table.version() + 1`; False when another writer committed that version first.

    No retries inside delta-rs: a retry would land the commit at a later version, on a state its writer never
    saw. On True, `table` holds the snapshot of the commit just made.
    """
    expected = table.version() + 1
    try:
        write_deltalake(table, rows, mode=mode, commit_properties=CommitProperties(max_commit_retries=0))
    except CommitFailedError:
        return False
    if table.version() != expected:
        raise RuntimeError(f"Delta table {table.table_uri}: committed at version {table.version()}, "
                           f"not at {expected}")
    return True
