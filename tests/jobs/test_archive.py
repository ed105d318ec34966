"""`switchyard archive` grows the archive from its previous cut: [a, b) then [b, c) archives what [a, c) does."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections import Counter

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.archive_files import ARCHIVE_META, list_archive
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import rows

PIPELINE = get_pipeline("demo")


def _quiet(*_):
    pass


def _topic(bootstrap: str, topic: str) -> list[oracle.KafkaRecord]:
    run_generate(bootstrap, topic, events=300, keys=10, partitions=2, days=2, seed=5, malformed_rate=0.05,
                 out=open(os.devnull, "w"))
    return oracle.read_topic(bootstrap, topic)


def _archived(tables: Tables) -> list[tuple[int, int, bytes | None]]:
    """(partition, offset, value) of every record in the archive's committed files, read without Spark."""
    import pyarrow.parquet as pq

    found = []
    for f in list_archive(tables.archive):
        columns = pq.read_table(f.path, columns=["kafka_partition", "kafka_offset", "value"]).to_pydict()
        found.extend(zip(columns["kafka_partition"], columns["kafka_offset"], columns["value"]))
    return found


def _meta(tables: Tables) -> dict:
    with open(os.path.join(tables.archive, ARCHIVE_META)) as fh:
        return json.load(fh)


def _up_to(records, ends: dict[int, int]) -> set[tuple[int, int, bytes | None]]:
    return {(r.partition, r.offset, r.value) for r in records if r.offset < ends[r.partition]}


def _ends(cut: dict[int, tuple[int, int]]) -> dict[int, int]:
    return {p: hi for p, (_, hi) in cut.items()}


def _state(spark, tables: Tables) -> list[tuple]:
    """The keyed state, sums rounded: files split differently may add the same amounts in another order."""
    return sorted(tuple(round(v, 6) if isinstance(v, float) else v for v in r) for r in rows(spark, tables.state))


def test_two_cuts_archive_what_one_does(spark, bootstrap, topic_name, tmp_path):
    records = _topic(bootstrap, topic_name)
    grown, whole = (Tables(str(tmp_path / name), PIPELINE.name) for name in ("grown", "whole"))
    half, most = (archive_cut(bootstrap, topic_name, fraction=f) for f in (0.5, 0.9))
    run_archive(spark, PIPELINE, grown, bootstrap, topic_name, half, out=_quiet)
    run_archive(spark, PIPELINE, grown, bootstrap, topic_name, most, out=_quiet)
    run_archive(spark, PIPELINE, whole, bootstrap, topic_name, most, out=_quiet)

    assert sorted(_archived(grown)) == sorted(_archived(whole))
    assert set(_archived(grown)) == _up_to(records, _ends(most))
    assert len(_archived(grown)) == len(_up_to(records, _ends(most)))
    for key in ("topic", "first", "cut", "records"):
        assert _meta(grown)[key] == _meta(whole)[key]
    assert _meta(grown)["first"] == {str(p): lo for p, (lo, _) in half.items()}
    assert len(_meta(grown)["files"]) > len(_meta(whole)["files"]), "the second cut added files"

    grown_run = run_backfill(spark, PIPELINE, grown, out=_quiet)
    whole_run = run_backfill(spark, PIPELINE, whole, out=_quiet)
    assert _state(spark, grown) == _state(spark, whole)
    assert grown_run.accounting == whole_run.accounting
    assert grown_run.boundary == whole_run.boundary == {p: hi - 1 for p, hi in _ends(most).items()}


def test_an_overlapping_range_is_trimmed_and_nothing_is_archived_twice(spark, bootstrap, topic_name, tmp_path):
    records = _topic(bootstrap, topic_name)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    half, most = (archive_cut(bootstrap, topic_name, fraction=f) for f in (0.5, 0.8))
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, half, out=_quiet)

    said = []
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, most, out=said.append)
    for p, (lo, cut) in half.items():
        trimmed = f"archive demo: p{p} offsets {lo}..{cut - 1} are archived already; archiving {cut}..{most[p][1] - 1}"
        assert trimmed in said
    archived = _archived(tables)
    assert Counter((p, o) for p, o, _ in archived).most_common(1)[0][1] == 1
    assert set(archived) == _up_to(records, _ends(most))

    # a range that is archived already writes nothing, says so, and leaves the metadata as it was
    meta = _meta(tables)
    said.clear()
    summary = run_archive(spark, PIPELINE, tables, bootstrap, topic_name, half, out=said.append)
    assert "nothing written" in summary
    assert any(f"p0 offsets {half[0][0]}..{half[0][1] - 1} are archived already; nothing to archive" in line
               for line in said)
    assert _meta(tables) == meta
    assert len(_archived(tables)) == len(archived)


def test_a_range_that_leaves_a_hole_or_names_another_topic_is_refused(spark, bootstrap, topic_name, tmp_path):
    _topic(bootstrap, topic_name)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    half = archive_cut(bootstrap, topic_name, fraction=0.5)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, half, out=_quiet)
    meta, files = _meta(tables), sorted(os.listdir(tables.archive))

    cut = half[0][1]
    beyond = {p: (hi + 10 if p == 0 else hi, hi + 50) for p, (_, hi) in half.items()}
    with pytest.raises(UserError) as refused:
        run_archive(spark, PIPELINE, tables, bootstrap, topic_name, beyond, out=_quiet)
    assert re.fullmatch(rf"archive demo: this run would leave offsets {cut}\.\.{cut + 9} of partition 0 unarchived: "
                        rf"archive from the current cut.*", str(refused.value))
    assert "\n" not in str(refused.value)

    with pytest.raises(UserError, match=f"holds topic {re.escape(topic_name)}, not other.topic"):
        run_archive(spark, PIPELINE, tables, bootstrap, "other.topic", half, out=_quiet)
    assert _meta(tables) == meta and sorted(os.listdir(tables.archive)) == files


def test_files_of_an_interrupted_run_are_never_read_and_removed_by_the_next(spark, bootstrap, topic_name, tmp_path):
    records = _topic(bootstrap, topic_name)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    part = archive_cut(bootstrap, topic_name, fraction=0.6)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, part, out=_quiet)
    committed = list_archive(tables.archive)
    # a run that died after Spark wrote its files and before the metadata named them: here, copies of a committed file
    orphan = os.path.join(os.path.dirname(committed[0].path), "part-99999-interrupted.c000.snappy.parquet")
    shutil.copyfile(committed[0].path, orphan)
    assert list_archive(tables.archive) == committed

    result = run_backfill(spark, PIPELINE, tables, out=_quiet)
    expected = _up_to(records, _ends(part))
    assert result.records_read == len(expected) == _meta(tables)["records"]
    assert {p: a["read"] for p, a in result.accounting.items()} == Counter(p for p, _, _ in expected)
    assert all(a["read"] == a["well_formed"] + a["dead_lettered"] for a in result.accounting.values())
    assert sum(r.event_count for r in rows(spark, tables.state)) == result.well_formed

    said = []
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=said.append)
    assert not os.path.exists(orphan)
    assert any("removing 1 file an interrupted archive run left uncommitted" in line for line in said)
    assert sorted(_archived(tables)) == sorted((r.partition, r.offset, r.value) for r in records)
