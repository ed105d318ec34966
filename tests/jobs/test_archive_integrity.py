"""The archive's commit record is the truth: a file it names that is missing or unreadable, or a record whose
ranges leave a gap or overlap, is refused in one line before anything is committed; one writer at a time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.rebase.run import rebase_pipeline
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control.handoffs import current_handoff
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import archive_meta, list_archive, write_archive_meta
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches

PIPELINE = get_pipeline("demo")
ROOT = Path(__file__).resolve().parents[2]


def _quiet(*_):
    pass


@pytest.fixture(scope="module")
def archived(spark, bootstrap, tmp_path_factory):
    """A small topic archived whole, in two runs; tests copy the archive."""
    topic = "archive.integrity"
    run_generate(bootstrap, topic, events=400, keys=12, partitions=2, days=2, seed=23, malformed_rate=0.05,
                 out=open(os.devnull, "w"))
    tables = Tables(str(tmp_path_factory.mktemp("archived")), PIPELINE.name)
    for fraction in (0.5, 1.0):
        run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=fraction),
                    out=_quiet)
    return {"tables": tables, "topic": topic, "records": oracle.read_topic(bootstrap, topic)}


@pytest.fixture
def tables(archived, tmp_path):
    fresh = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    shutil.copytree(archived["tables"].archive, fresh.archive)
    return fresh


def _meta(tables: Tables) -> dict:
    return archive_meta(tables.archive)


def _write_meta(tables: Tables, meta: dict) -> None:
    """A record edited by hand (or by another tool), committed as the archive's record."""
    write_archive_meta(tables.archive, meta)


def _held(tables: Tables, path: str) -> str:
    """The ranges a file held as the refusal names them, from the record read here."""
    ranges = _meta(tables)["files"][os.path.relpath(path, tables.archive)]
    return ", ".join(f"p{p}:{lo}..{hi} ({n} records)" for p, (lo, hi, n) in sorted(ranges.items()))


def _data(path: str) -> list[str] | None:
    """The data files of the table at `path` (a lease's fence commit, which changes no data, leaves them as they are)."""
    return sorted(DeltaTable(path).file_uris()) if os.path.isdir(os.path.join(path, "_delta_log")) else None


def _committed(tables: Tables) -> tuple:
    """What a refused run must leave as it was: the handoff log and every table's data."""
    return (len(handoff_log.entries(tables)),
            *(_data(p) for p in (tables.tiles, tables.state, tables.windows, tables.dead_letter)))


def _refused(spark, tables: Tables, pattern: str, **flags) -> str:
    before = _committed(tables)
    with pytest.raises(UserError) as refused:
        run_backfill(spark, PIPELINE, tables, out=_quiet, **flags)
    message = str(refused.value)
    assert "\n" not in message
    assert re.search(pattern, message), message
    assert _committed(tables) == before, "a refused backfill committed something"
    return message


def _below_the_others(tables: Tables) -> str:
    """A committed file holding offsets below what other files hold: the stream would never read them again."""
    files = _meta(tables)["files"]

    def highest_elsewhere(name, p):
        return max((r[p][1] for other, r in files.items() if other != name and p in r), default=-1)

    name = next(name for name, ranges in sorted(files.items()) for p in sorted(ranges)
                if ranges[p][0] <= highest_elsewhere(name, p))
    return os.path.join(tables.archive, name)


def test_a_deleted_committed_file_is_refused_naming_its_ranges(spark, bootstrap, archived, tables):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    gone = _below_the_others(tables)
    held = _held(tables, gone)
    os.remove(gone)
    _refused(spark, tables, re.escape(f"archive file {gone} is missing; the archive record says it held {held}"))

    # --skip-bad-files: a recorded gap, which the handoff refuses, as for an unreadable file
    result = run_backfill(spark, PIPELINE, tables, skip_bad_files=True, out=_quiet)
    assert result.skipped_files == [gone]
    committed = details.of(handoff_log.latest(tables, Status.BACKFILL_COMMITTED))
    assert committed.complete is False and {g["file"] for g in committed.gaps} == {gone}
    with pytest.raises(UserError, match=re.escape(f"archive file {gone} was skipped")):
        run_handoff(spark, PIPELINE, tables, bootstrap)
    assert handoff_log.latest(tables, Status.HANDOFF_COMMITTED) is None


def test_a_file_deleted_between_the_tiles_and_the_commit_is_refused(spark, tables):
    """Dagster runs the tiles and the state as separate steps: a committed file gone in between stops the commit."""
    from switchyard.jobs.backfill import backfill_tiles, commit_backfill

    backfill_tiles(spark, PIPELINE, tables, out=_quiet)
    gone = _below_the_others(tables)
    held = _held(tables, gone)
    os.remove(gone)
    with pytest.raises(UserError, match=re.escape(f"archive file {gone} is missing; the archive record says it held "
                                                  f"{held}")):
        commit_backfill(spark, PIPELINE, tables, out=_quiet)
    assert handoff_log.latest(tables, Status.BACKFILL_COMMITTED) is None
    assert handoff_log.latest(tables).status == Status.FAILED


def test_a_truncated_committed_file_is_refused_naming_its_ranges(spark, tables):
    bad = list_archive(tables.archive)[-1].path
    held = _held(tables, bad)
    with open(bad, "r+b") as fh:
        fh.truncate(40)
    _refused(spark, tables, re.escape(f"archive file {bad} is not readable Parquet (") + ".*"
             + re.escape(f"; the archive record says it held {held}: restore it, or rerun with --skip-bad-files"))


def test_a_file_replaced_with_fewer_records_is_refused_before_the_commit(spark, tables):
    """A readable file that no longer holds what the record says (rewritten by another tool): the records read
    per partition differ from the record, and the backfill stops before BACKFILL_COMMITTED."""
    import pyarrow.parquet as pq

    target = list_archive(tables.archive)[0].path
    table = pq.read_table(target)
    os.remove(os.path.join(os.path.dirname(target), f".{os.path.basename(target)}.crc"))
    pq.write_table(table.slice(0, table.num_rows - 3), target)
    with pytest.raises(UserError, match=r"the archive record says its files hold \d+ records of partition \d, the "
                                        r"backfill read \d+ \(\d+ well-formed or dead-lettered\)"):
        run_backfill(spark, PIPELINE, tables, out=_quiet)
    assert handoff_log.latest(tables, Status.BACKFILL_COMMITTED) is None


def test_a_record_that_leaves_a_gap_or_overlaps_is_refused(spark, archived, tables):
    meta = _meta(tables)

    # a file dropped from the record: on disk it is an orphan, never read; its records would be lost
    dropped = dict(meta, files={k: v for i, (k, v) in enumerate(sorted(meta["files"].items())) if i != 0})
    _write_meta(tables, dropped)
    _refused(spark, tables, r"records missing from its files map \(a gap\)")

    # a run that does not start where the one before ended
    runs = json.loads(json.dumps(meta["runs"]))
    runs[1]["from"]["0"] += 3
    _write_meta(tables, dict(meta, runs=runs))
    _refused(spark, tables, r"leaves partition 0 offsets \d+\.\.\d+ in no archive run \(a gap\)")

    # the same file named twice under two names: its records would be read twice
    name, ranges = sorted(meta["files"].items())[0]
    copy = name.replace(".parquet", "-copy.parquet")
    shutil.copyfile(os.path.join(tables.archive, name), os.path.join(tables.archive, copy))
    _write_meta(tables, dict(meta, files={**meta["files"], copy: ranges}))
    _refused(spark, tables, r"named twice \(an overlap\)")

    # two runs over the same offsets
    runs = json.loads(json.dumps(meta["runs"]))
    runs[1]["from"]["1"] -= 2
    _write_meta(tables, dict(meta, runs=runs))
    _refused(spark, tables, r"records partition 1 offsets \d+\.\.\d+ in two archive runs \(an overlap\)")

    # the record as written reads whole, equal to the oracle
    os.remove(os.path.join(tables.archive, copy))
    _write_meta(tables, meta)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    assert_state_matches(spark, tables, oracle.backlog(archived["records"]))


def test_a_rebase_with_a_missing_archive_file_refuses_and_leaves_the_handoff(spark, bootstrap, archived, tables):
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    handoff = run_handoff(spark, PIPELINE, tables, bootstrap)
    gone = _below_the_others(tables)
    held = _held(tables, gone)
    os.remove(gone)
    before = _data(tables.state)
    with pytest.raises(UserError, match=re.escape(f"archive file {gone} is missing; the archive record says it held "
                                                  f"{held}")):
        rebase_pipeline(PIPELINE, tables, bootstrap, "rebase", "switchyard rebase", lambda: spark, out=_quiet)
    statuses = [e.status for e in handoff_log.entries(tables)]
    assert statuses[-2:] == [Status.REBASE_REQUESTED, Status.REBASE_REFUSED] and Status.PAUSED not in statuses
    assert current_handoff(tables).handoff_id == handoff.handoff_id
    assert PipelineView.read(tables).ledger.open_rebase is None, "the refused request stays answered: the next stream streams as before"
    assert _data(tables.state) == before


def _archive_all(tables: Tables, bootstrap: str, topic: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "archive", "--pipeline", PIPELINE.name, "--topic", topic,
                           "--fraction", "1.0", "--warehouse", tables.warehouse, "--bootstrap", bootstrap], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"})


def test_an_archive_while_another_archive_run_holds_its_lease_is_refused_naming_the_owner(bootstrap, archived, tables):
    """Another archive run would remove this one's files as orphans: the second is refused before Spark starts."""
    meta = _meta(tables)
    with lease.hold(tables.archive_writer(), lease.ARCHIVE):
        done = _archive_all(tables, bootstrap, archived["topic"])
    assert done.returncode == 75, done.stdout + done.stderr  # not now: the lease is another run's for the moment
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and re.search(rf"pipeline demo is owned by `{lease.ARCHIVE}` \(pid {os.getpid()} ",
                                         lines[0]), done.stderr
    assert _meta(tables) == meta


def test_the_archive_grows_beside_a_live_stream(bootstrap, archived, tmp_path):
    """The stream holds the pipeline's lease and reads Kafka, not the archive: the nightly archiver runs beside it."""
    tables = Tables(str(tmp_path / "beside"), PIPELINE.name)
    with lease.hold(tables, lease.STREAM):
        done = _archive_all(tables, bootstrap, archived["topic"])
    assert done.returncode == 0, done.stdout + done.stderr
    assert sum(_meta(tables)["runs"][-1]["records"].values()) == len(archived["records"])


def test_an_archive_run_whose_record_changed_under_it_commits_nothing(spark, bootstrap, archived, tmp_path):
    """Two archive runs racing (one without the lease): the later commit sees the record moved and refuses."""
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    topic = archived["topic"]
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.3), out=_quiet)
    other = Tables(str(tmp_path / "other"), PIPELINE.name)
    shutil.copytree(tables.archive, other.archive)
    run_archive(spark, PIPELINE, other, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.6), out=_quiet)
    theirs = _meta(other)

    def another_run_commits(line: str) -> None:
        if "reading" in line:  # this run has planned from the old record; the other commits before it does
            _write_meta(tables, theirs)

    with pytest.raises(UserError, match="changed while this run wrote its files.*nothing committed"):
        run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=1.0),
                    out=another_run_commits)
    assert _meta(tables) == theirs


def test_an_unreadable_archive_record_is_refused_in_one_line(spark, tables):
    """A file of the record's own table damaged on disk: a one-line refusal naming the record, never a traceback
    (found by the fault campaign, seed 1)."""
    victim = Path(DeltaTable(str(Path(tables.archive, "_record"))).file_uris()[-1].removeprefix("file://"))
    kept = victim.read_bytes()
    victim.write_bytes(b"PAR1" + bytes(64) + b"PAR1")
    _refused(spark, tables, r"the archive record .*_record cannot be read \(.*\): if the store answers, a file of "
                            r"it is damaged: restore the record from a backup")
    victim.write_bytes(kept)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    assert handoff_log.latest(tables, Status.BACKFILL_COMMITTED) is not None
