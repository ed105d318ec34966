"""The format version of a pipeline's tables: what this switchyard writes and the only one it reads. Data of another
format is refused in one line, as Delta refuses a table whose protocol its reader does not support, instead of
branches for older writers spread through the readers.

The version is recorded once per pipeline, in the Delta table `format_version` (Tables.format_version): one row,
written in the commit that creates the table, just before the pipeline's handoff log is created
(control/handoff_log.py), so no log of this format is ever without it. A Delta table, read through delta-rs, is
read alike from any host, on a local folder or an object store, with no JVM. Not a property of the log itself:
delta-rs creates no table with a property outside Delta's own (it refuses them while parsing), and setting one
afterwards would be a second commit on the log, one a reader could see the log without.

`Tables` checks the version the first time a process asks for one of the pipeline's paths, and remembers the
answer. A pipeline with no log yet is new: nothing to refuse, and nothing read again (an archive alone, archived
ahead of the first backfill or copied in from another warehouse, is taken as this format); its first log records
this version. A log with no version recorded is of format 0, the one before versions were recorded, and refused
like any other.
"""

from __future__ import annotations

import threading

FORMAT_VERSION = 1
UNRECORDED = 0  # the format of a log that records none

_checked: set[str] = set()  # the format records this process has found current, or found no pipeline behind
_lock = threading.Lock()


def _schema():
    import pyarrow as pa

    return pa.schema([("format", pa.int64()), ("recorded_at", pa.timestamp("us", tz="UTC"))])


def record(uri: str) -> None:
    """Record FORMAT_VERSION in a new table at `uri`, created with its one row; nothing when one is there already."""
    import pyarrow as pa
    from deltalake import write_deltalake
    from deltalake.exceptions import DeltaError

    from switchyard.state_handoff.clock import utc_now
    from switchyard.state_handoff.io.storage import delta_options

    if _recorded(uri) is not None:
        return
    row = pa.Table.from_pylist([{"format": FORMAT_VERSION, "recorded_at": utc_now()}], _schema())
    try:
        write_deltalake(uri, row, mode="error", storage_options=delta_options(uri))
    except DeltaError:
        if _recorded(uri) is None:  # not a creator that came first: a failure
            raise


def _recorded(uri: str) -> int | None:
    """The version the table at `uri` records; None when there is no such table."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from switchyard.state_handoff.io.delta_cas import read
    from switchyard.state_handoff.io.storage import delta_options

    try:
        table = DeltaTable(uri, storage_options=delta_options(uri))
    except TableNotFoundError:
        return None
    formats = read(table, ["format"]).column("format").to_pylist()
    return formats[0] if formats else UNRECORDED


def check(uri: str, log: str, warehouse: str, pipeline: str) -> None:
    """Raise UserError when the pipeline whose format record is at `uri` and whose handoff log is at `log` holds
    another format than FORMAT_VERSION. Read once per process: a pipeline found current, or not there, is not
    read again."""
    from switchyard.state_handoff.errors import UserError
    from switchyard.state_handoff.io import storage

    if uri in _checked:
        return
    with _lock:
        if uri in _checked:
            return
        found = _recorded(uri)
        if found is None and storage.exists(storage.join(log, "_delta_log")):
            found = UNRECORDED
        if found not in (None, FORMAT_VERSION):
            fix = (f"run a switchyard that reads format {found}" if found > FORMAT_VERSION else
                   "archive and backfill it again into a new --warehouse")
            raise UserError(f"pipeline {pipeline} of warehouse {warehouse} holds switchyard format {found} (this "
                            f"switchyard reads format {FORMAT_VERSION}): {fix}")
        _checked.add(uri)
