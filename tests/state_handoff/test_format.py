"""The format version of a pipeline's tables, with real Delta tables (delta-rs, no Spark): a new pipeline's first log
records this switchyard's format and reads back in another process; a log of another format, or one that records
none, is refused in one line wherever the pipeline's tables are asked for, the command line's exit 2 included; and
the record is read once per process."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from switchyard.state_handoff import format as table_format
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.delta_cas import read
from switchyard.state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[2]


def _log_of_another_switchyard(warehouse: Path, recorded: int | None) -> None:
    """A pipeline `demo` as another switchyard left it: a log with one entry and, unless None, the format
    `recorded`; made with delta-rs alone, never through Tables, which would check it."""
    pipeline = warehouse / "demo"
    if recorded is not None:
        write_deltalake(str(pipeline / "format_version"),
                        pa.Table.from_pylist([{"format": recorded, "recorded_at": datetime.now(timezone.utc)}]))
    row = {"seq": 1, "handoff_id": "h1", "pipeline": "demo", "status": str(Status.BACKFILL_STARTED),
           "at": datetime.now(timezone.utc), "state_version": None, "start_offsets": None, "backlog_watermark": None,
           "details": "{}"}
    write_deltalake(str(pipeline / "handoffs"), pa.Table.from_pylist([row], handoff_log.SCHEMA))


def _switchyard(*args: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_PIPELINE"}
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, env=environment, timeout=120)


def test_a_new_pipeline_records_this_format_with_its_first_log(tmp_path):
    tables = Tables(str(tmp_path / "wh"), "demo")
    assert not os.path.exists(tables.state), "asking for a path of a pipeline not there yet creates nothing"
    handoff_log.append(tables, "h1", Status.BACKFILL_STARTED)

    recorded = read(DeltaTable(tables.format_version), ["format"]).column("format").to_pylist()
    assert recorded == [table_format.FORMAT_VERSION]
    assert [e.seq for e in handoff_log.entries(tables)] == [1], "the record is no commit of the log"
    elsewhere = subprocess.run(
        [sys.executable, "-c", "from switchyard.state_handoff.control import handoff_log\n"
         "from switchyard.state_handoff.tables import Tables\n"
         f"print(len(handoff_log.entries(Tables({tables.warehouse!r}, 'demo'))))"],
        capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert (elsewhere.returncode, elsewhere.stdout) == (0, "1\n"), elsewhere.stderr[-2000:]


@pytest.mark.parametrize("recorded, fix", [
    (None, "archive and backfill it again into a new --warehouse"),
    (0, "archive and backfill it again into a new --warehouse"),
    (table_format.FORMAT_VERSION + 1, f"run a switchyard that reads format {table_format.FORMAT_VERSION + 1}"),
])
def test_a_pipeline_of_another_format_is_refused_in_one_line_before_anything_is_read(tmp_path, recorded, fix):
    warehouse = tmp_path / "wh"
    _log_of_another_switchyard(warehouse, recorded)
    before = (DeltaTable(str(warehouse / "demo" / "handoffs")).version(), os.listdir(warehouse / "demo"))
    found = 0 if recorded is None else recorded
    refusal = (f"pipeline demo of warehouse {warehouse} holds switchyard format {found} (this switchyard reads format "
               f"{table_format.FORMAT_VERSION}): {fix}")

    tables = Tables(str(warehouse), "demo")
    for ask in (lambda: tables.state, lambda: tables.archive_writer().leases, lambda: tables.stream_dir,
                lambda: handoff_log.entries(tables),
                lambda: handoff_log.append(tables, "h1", Status.BACKFILL_COMMITTED)):
        with pytest.raises(UserError) as refused:
            ask()
        assert str(refused.value) == refusal
    assert (DeltaTable(str(warehouse / "demo" / "handoffs")).version(), os.listdir(warehouse / "demo")) == before, \
        "a refused pipeline is left as it was"


def test_the_command_line_refuses_another_format_in_one_line_with_exit_2(tmp_path):
    warehouse = tmp_path / "wh"
    _log_of_another_switchyard(warehouse, 0)
    result = _switchyard("status", "--pipeline", "demo", "--warehouse", str(warehouse))
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr == (f"switchyard status: error: pipeline demo of warehouse {warehouse} holds switchyard "
                             f"format 0 (this switchyard reads format {table_format.FORMAT_VERSION}): archive and "
                             "backfill it again into a new --warehouse\n"), result.stderr


def test_the_format_is_read_once_per_process_and_not_at_all_again_for_a_new_pipeline(tmp_path, monkeypatch):
    reads = []
    recorded = table_format._recorded
    monkeypatch.setattr(table_format, "_recorded", lambda uri: reads.append(uri) or recorded(uri))

    new = Tables(str(tmp_path / "new"), "demo")
    for _ in range(3):
        Tables(new.warehouse, "demo").state
    assert len(reads) == 1, "a pipeline not there yet is looked for once"

    handoff_log.append(new, "h1", Status.BACKFILL_STARTED)
    handoff_log.append(new, "h1", Status.BACKFILL_COMMITTED)
    assert len(reads) == 2, "its first log records the format (one look first); the check is not made again"

    current = tmp_path / "current"
    _log_of_another_switchyard(current, table_format.FORMAT_VERSION)
    for _ in range(3):
        Tables(str(current), "demo").state
        Tables(str(current), "demo").archive_writer().leases
    assert len(reads) == 3
