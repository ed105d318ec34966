"""Compare-and-swap on a Delta table's version, through delta-rs: a commit lands at exactly the version after the
one its writer read, or not at all, so the writer's decision was made on the latest state of the table."""

from __future__ import annotations

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from switchyard.state_handoff.io.storage import delta_options


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


def commit_next(table: DeltaTable, rows: pa.Table, mode: str = "append", schema_mode: str | None = None,
                properties: CommitProperties | None = None) -> bool:
    """Commit `rows` at `table.version() + 1`; False when another writer committed that version first.
    `properties`: the commit's properties (app transactions, commit info), their retries set to none here.

    No retries inside delta-rs: a retry would land the commit at a later version, on a state its writer never
    saw. On True, `table` holds the snapshot of the commit just made.
    """
    expected = table.version() + 1
    try:
        properties = properties or CommitProperties()
        properties.max_commit_retries = 0
        write_deltalake(table, rows, mode=mode, schema_mode=schema_mode, commit_properties=properties)
    except CommitFailedError:
        return False
    if table.version() != expected:
        raise RuntimeError(f"Delta table {table.table_uri}: committed at version {table.version()}, "
                           f"not at {expected}")
    return True


def read(table: DeltaTable, columns: list[str] | None = None, order_by: str | None = None,
         where: str | None = None) -> pa.Table:
    """The table's rows at its snapshot (those matching the SQL condition `where`), read by delta-rs's own engine.

    Not `to_pyarrow_table`: its pyarrow dataset scan leaves Arrow threads that abort some interpreter exits
    ("terminate called without an active exception", exit -6) after the command's work is done; this engine's reads
    leave none. Views (string_view) come back as plain types, so pyarrow.compute works.
    """
    from deltalake import QueryBuilder

    select = ", ".join(f'"{c}"' for c in columns) if columns else "*"
    sql = (f'SELECT {select} FROM "t"' + (f" WHERE {where}" if where else "")
           + (f' ORDER BY "{order_by}"' if order_by else ""))
    data = pa.table(QueryBuilder().register("t", table).execute(sql).read_all())
    plain = {pa.string_view(): pa.string(), pa.binary_view(): pa.binary()}
    return data.cast(pa.schema([f.with_type(plain.get(f.type, f.type)) for f in data.schema]))
