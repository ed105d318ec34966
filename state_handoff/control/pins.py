"""Settings every process of a pipeline must share, recorded with the pipeline: today SWITCHYARD_MAX_RECORD_BYTES,
which decides whether a record is dead-lettered as too_large. Two phases that read the same record under two values
would classify it twice, differently; so the pipeline's first run records the value it classifies by, and every later
command takes it from there.

The record is the Delta table `pipeline_settings` (Tables.pipeline_settings), read and written through delta-rs, one
row appended per value recorded, by compare-and-swap on the table version (state_handoff/io/delta_cas.py): of two
first runs with different values exactly one records its own, the other then finds it and refuses. The newest row of
a setting is its value.

`settle` is what a command calls at its start, before a JVM starts or Kafka is contacted: a process whose value
differs from the recorded one is refused in one line naming the setting, both values and what to do; a process that
leaves the setting unset takes the recorded value into its environment (which its Spark session, its Python workers
and the processes it starts read); with `record`, a pipeline with nothing recorded records the process's value in
effect. `change` is `switchyard config --pipeline P --record NAME=VALUE`: the one way to change a recorded value on
purpose, and only while the pipeline has classified no record (nothing archived, no backfill, no handoff), since a
new value would classify its records again differently.
"""

from __future__ import annotations

import os
import socket
from collections.abc import MutableMapping
from typing import Any

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from switchyard.state_handoff import settings
from switchyard.state_handoff.clock import utc_now
from switchyard.state_handoff.errors import Failed, UserError
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.delta_cas import commit_next, open_or_create, read
from switchyard.state_handoff.io.storage import delta_options
from switchyard.state_handoff.language.record_limits import MAX_RECORD_BYTES_ENV
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.tables import Tables

PIPELINE_WIDE = (MAX_RECORD_BYTES_ENV,)
COMMIT_ATTEMPTS = 20

SCHEMA = pa.schema([
    ("seq", pa.int64()),  # the version of the commit that wrote the row
    ("name", pa.string()),
    ("value", pa.string()),  # as the setting's text
    ("recorded_at", pa.timestamp("us", tz="UTC")),
    ("recorded_by", pa.string()),  # the command, and the host and pid it ran as
])


def recorded(tables: Tables) -> dict[str, str]:
    """Each pipeline-wide setting's recorded text; empty when the pipeline has recorded none."""
    try:
        table = DeltaTable(tables.pipeline_settings, storage_options=delta_options(tables.pipeline_settings))
    except TableNotFoundError:
        return {}
    return _latest(table)


def _latest(table: DeltaTable) -> dict[str, str]:
    return {row["name"]: row["value"] for row in read(table, ["name", "value"], order_by="seq").to_pylist()}


def _append(tables: Tables, values: dict[str, str], by: str, unless_recorded: bool) -> dict[str, str]:
    """Record `values` at the version after the one read; with `unless_recorded`, only the settings not yet
    recorded (what a first run does). The recorded values after the commit."""
    table = open_or_create(tables.pipeline_settings, SCHEMA, name="pipeline_settings",
                           description="settings every process of the pipeline shares: the newest row of each")
    for _ in range(COMMIT_ATTEMPTS):
        current = _latest(table)
        new = {name: text for name, text in values.items() if not (unless_recorded and name in current)}
        if not new:
            return current
        seq = table.version() + 1
        now = utc_now()
        rows = pa.Table.from_pylist([{"seq": seq, "name": name, "value": text, "recorded_at": now,
                                      "recorded_by": f"{by} (pid {os.getpid()} on host {socket.gethostname()})"}
                                     for name, text in new.items()], SCHEMA)
        if commit_next(table, rows):
            return {**current, **new}
        table.update_incremental()
    raise Failed(f"pipeline {tables.pipeline}: settings not recorded after {COMMIT_ATTEMPTS} attempts")


def _refusal(tables: Tables, name: str, mine: Any, theirs: str, adopt: bool) -> UserError:
    fix = f"unset it or set it to {theirs}" if adopt else f"set it to {theirs} in this process's environment"
    return UserError(f"{name} is {mine} in this process but pipeline {tables.pipeline} records {theirs} (the value "
                     f"its records are classified by, the same in every process): {fix} "
                     f"(to change the pipeline's value before it has classified records: `switchyard config "
                     f"--pipeline {tables.pipeline} --record {name}=VALUE`)")


def settle(tables: Tables, command: str, record: bool = False, adopt: bool = True,
           env: MutableMapping[str, str] | None = None, pipeline: Pipeline | None = None) -> dict[str, Any]:
    """Each pipeline-wide setting's value for this pipeline, typed; UserError when this process gives another
    value than the one recorded. With `adopt`, a setting this process leaves unset takes the recorded text into
    `env` (this process's environment by default): for a command's own process. Without it (a process serving
    several pipelines, such as Dagster's), the value in effect, the default when unset, must be the recorded one.
    With `record`, the process's values in effect are recorded where none is. With `pipeline`, its definition must
    be the one the pipeline's tables were made with (control/recorded_definition.py)."""
    if pipeline is not None:
        from switchyard.state_handoff.control import handoff_log, recorded_definition

        recorded_definition.refuse_changed(pipeline, handoff_log.entries(tables))
    env = os.environ if env is None else env
    current = recorded(tables)
    if record and any(name not in current for name in PIPELINE_WIDE):
        current = _append(tables, {name: str(settings.value(name, env)) for name in PIPELINE_WIDE
                                   if name not in current}, command, unless_recorded=True)
    values = {}
    for name in PIPELINE_WIDE:
        mine = settings.value(name, env)  # a bad value is refused here, as at any command's start
        if name not in current:
            values[name] = mine
            continue
        theirs = settings.parse(name, current[name])
        if adopt and settings.given(name, env) is None:
            env[name] = current[name]
        elif mine != theirs:
            raise _refusal(tables, name, mine, current[name], adopt)
        values[name] = theirs
    return values


def has_classified(tables: Tables) -> bool:
    """Whether a command has classified any of the pipeline's records: an archive, a backfill's tiles or a handoff
    log exists (a stream needs a handoff)."""
    return any(storage.exists(uri) for uri in (tables.archive, tables.tiles, tables.handoffs, tables.dead_letter))


def change(tables: Tables, assignment: str, by: str) -> str:
    """`NAME=VALUE` recorded as the pipeline's value on purpose; UserError when NAME is not pipeline-wide, VALUE
    is not one of its values, or the pipeline has already classified records by another value."""
    name, equals, text = assignment.partition("=")
    name, text = name.strip(), text.strip()
    if not equals or not name:
        raise UserError(f"--record takes NAME=VALUE, such as {MAX_RECORD_BYTES_ENV}=1048576, not {assignment!r}")
    if name not in PIPELINE_WIDE:
        raise UserError(f"{name} is not recorded with a pipeline: the settings that are: {', '.join(PIPELINE_WIDE)}")
    value = settings.parse(name, text)
    current = recorded(tables)
    was = current.get(name)
    if was is not None and settings.parse(name, was) == value:
        return f"pipeline {tables.pipeline}: {name}={was} recorded already"
    if has_classified(tables):
        by_value = f" by {name}={was}" if was is not None else ""
        raise UserError(f"pipeline {tables.pipeline} has classified records{by_value}: another value "
                        "would classify them again differently, so it stays; a pipeline with another value starts "
                        "in a new warehouse or under another pipeline name")
    _append(tables, {name: str(value)}, by, unless_recorded=False)
    return f"pipeline {tables.pipeline}: {name}={value} recorded" + (f" (was {was})" if was is not None else "")
