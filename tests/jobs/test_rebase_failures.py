"""A rebase that does not complete leaves nothing half-done: its request stays open at the recorded cut, and the
next `stream` (or `rebase`) finishes it; against the oracle, accounting identity included."""

from __future__ import annotations

import os
import re
from datetime import datetime
from pathlib import Path

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.archive_files import list_archive
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.stream import progress as stream_progress
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_rebase import _cli, _handoffs, assert_exact_across_handoffs
from tests.support.cli import cli_here
from tests.support.streams import stream_until_caught_up, tail_events

PIPELINE = get_pipeline("demo")


def _prepare(spark, bootstrap, topic, warehouse, fraction: float) -> Tables:
    run_generate(bootstrap, topic, events=800, keys=20, partitions=2, days=2, seed=41, malformed_rate=0.03,
                 out=open(os.devnull, "w"))
    tables = Tables(str(warehouse), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=fraction),
                out=lambda *_: None)
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    return tables


def assert_accounting_identity(bootstrap, topic, tables: Tables, expected) -> None:
    """Per partition, the first backfill's accounting plus every handoff's events batches: each record read once,
    and well-formed + dead-lettered = read."""
    first_backfill = next(e for e in handoff_log.entries(tables) if e.status == Status.BACKFILL_COMMITTED)
    backfill = details.of(first_backfill).accounting
    streamed = stream_progress.accounting([b for h in _handoffs(tables)
                                           for b in stream_progress.batches(tables, h.handoff_id)])
    for p in expected.read:
        b = backfill.get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        s = streamed.get(str(p), {"read": 0, "well_formed": 0, "dead_lettered": 0})
        assert b["read"] + s["read"] == expected.read[p], (p, b, s)
        assert b["well_formed"] + s["well_formed"] == expected.well_formed[p], (p, b, s)
        assert b["read"] + s["read"] == b["well_formed"] + s["well_formed"] + b["dead_lettered"] + s["dead_lettered"]


def test_a_rebase_after_a_stream_that_read_nothing(spark, bootstrap, topic_name, tmp_path):
    """Everything archived and handed off; a stream stops at once (nothing new: no events batch); events arrive;
    `rebase` completes, and the stream after it ends equal to the oracle."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=1.0)
    stream_until_caught_up(spark, tables, bootstrap)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=41))
    rebase, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    assert rebase == 0, out
    assert "Traceback" not in out, out
    stream_until_caught_up(spark, tables, bootstrap)
    assert len(_handoffs(tables)) == 2
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert_accounting_identity(bootstrap, topic_name, tables, expected)


def test_a_rebase_refused_on_a_corrupt_archive_file_is_finished_once_it_is_repaired(spark, bootstrap, topic_name,
                                                                                      tmp_path):
    """A stream that has streamed; the archive grows and one new file is corrupt; `rebase` refuses in one line
    naming it, before it pauses the stream (the archive is checked first); the file is repaired; the next `stream`
    carries on with the same handoff: nothing dead-lettered, late or windowed twice, nothing lost."""
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=42))
    stream_until_caught_up(spark, tables, bootstrap)
    before = {f.path for f in list_archive(tables.archive)}
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=0.8),
                out=lambda *_: None)
    corrupt = sorted(f.path for f in list_archive(tables.archive) if f.path not in before)[0]
    local = Path(corrupt.removeprefix("file://").removeprefix("file:"))
    good = local.read_bytes()
    local.write_bytes(b"PAR1 not parquet at all" * 10)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 40, seed=43))  # past E: the catch-up

    refused, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    error = out.strip().splitlines()[-1]
    assert refused == 2 and "Traceback" not in out, out
    assert error.startswith("switchyard rebase: error:") and os.path.basename(corrupt) in error, out

    local.write_bytes(good)  # repaired
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 6), 40, seed=44))
    stream_until_caught_up(spark, tables, bootstrap)
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert_accounting_identity(bootstrap, topic_name, tables, expected)
    assert len(_handoffs(tables)) == 1, "the refused rebase left the stream on its handoff"
    assert Status.PAUSED not in {e.status for e in handoff_log.entries(tables)}, "refused before the pause"


def test_a_batch_id_committed_over_one_range_is_refused_over_another(spark, bootstrap, topic_name, tmp_path):
    """The events path caught up to a cut writes its next batch id over [E, C); asked for that batch id again over
    [E, C') it refuses in one line instead of skipping every write as done (which would lose [C, C')); asked
    again over [E, C) it writes nothing twice."""
    from switchyard.jobs.rebase.cut import catch_up_events
    from switchyard.state_handoff.control.requests import Cut
    from switchyard.state_handoff.control.handoffs import current_handoff
    from switchyard.state_handoff.io.kafka_io import offset_bounds
    from switchyard.state_handoff.stream.layout import StreamPaths
    from tests.support import oracle
    from tests.support.compare import rows

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    handoff = current_handoff(tables)
    paths = StreamPaths.of(tables, handoff.handoff_id)
    start = handoff.start_offsets
    mid = {p: (start[p] + hi) // 2 for p, (_, hi) in offset_bounds(bootstrap, topic_name).items()}
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 30, seed=45))
    end = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic_name).items()}

    catch_up_events(spark, PIPELINE, tables, bootstrap, handoff, paths, Cut(mid, start, start))
    dead_before = sorted((r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.dead_letter))
    try:
        catch_up_events(spark, PIPELINE, tables, bootstrap, handoff, paths, Cut(end, start, start))
        refusal = None
    except Exception as err:  # noqa: BLE001 - the refusal's type is what the code as it was lacks
        refusal = str(err)
    assert refusal is not None, "batch 0 asked over a wider range was skipped as already written"
    assert "\n" not in refusal and "batch 0" in refusal and "refusing" in refusal, refusal
    catch_up_events(spark, PIPELINE, tables, bootstrap, handoff, paths, Cut(mid, start, start))  # the same range
    dead = sorted((r.kafka_partition, r.kafka_offset) for r in rows(spark, tables.dead_letter))
    assert dead == dead_before, "a batch written twice"
    records = oracle.read_topic(bootstrap, topic_name)
    expected_dead = {(r.partition, r.offset) for r in records if start[r.partition] <= r.offset < mid[r.partition]
                     and oracle.classify(r.value)[0]}
    assert {d for d in dead if d[1] >= start[d[0]]} == expected_dead


def _tamper_state(tables: Tables, key: str) -> None:
    """A difference at the cut: one key's streamed event count off by one in `state`, as a lost or doubled update
    would leave it."""
    from deltalake import DeltaTable

    DeltaTable(tables.state).update(predicate=f"{PIPELINE.key} = '{key}'",
                                    updates={"event_count": "event_count + 1"})


def test_a_reconciliation_difference_stops_the_rebase_until_accepted(spark, bootstrap, topic_name, tmp_path):
    """A streamed state that differs from the recomputed one at the cut: `rebase` refuses in one line, logs
    RECONCILIATION_FAILED with the key as an example, replaces nothing, and the stream streams on from the same
    handoff; `rebase --accept-differences` then replaces it, and the tables equal the oracle."""
    from tests.support.compare import rows

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.5)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=46))
    stream_until_caught_up(spark, tables, bootstrap)
    key = sorted(r[PIPELINE.key] for r in rows(spark, tables.state) if re.fullmatch(r"[\w-]+", r[PIPELINE.key]))[0]
    _tamper_state(tables, key)
    tampered = {r[PIPELINE.key]: r.event_count for r in rows(spark, tables.state)}

    refused, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    error = out.strip().splitlines()[-1]
    assert refused == 2 and "Traceback" not in out, out
    assert "1 of" in error and "--accept-differences" in error and key in error, out
    failed = [e for e in handoff_log.entries(tables) if e.status == Status.RECONCILIATION_FAILED]
    assert len(failed) == 1 and details.of(failed[0]).resumable, failed
    examples = details.of(failed[0]).reconciliation["examples"]
    assert [x["key"] for x in examples] == [key]
    assert len(_handoffs(tables)) == 1, "nothing handed off"
    assert {r[PIPELINE.key]: r.event_count for r in rows(spark, tables.state)} == tampered, "nothing replaced"

    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 2), 30, seed=47))
    stream_until_caught_up(spark, tables, bootstrap)  # the same handoff streams on
    assert len(_handoffs(tables)) == 1
    accepted, out = cli_here(tables, bootstrap, "rebase", "--accept-differences", "--timeout", "600")
    assert accepted == 0, out
    assert len(_handoffs(tables)) == 2
    stream_until_caught_up(spark, tables, bootstrap)
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert_accounting_identity(bootstrap, topic_name, tables, expected)


def test_a_rebase_killed_after_replacing_the_state_reconciles_against_the_paused_state(spark, bootstrap, topic_name,
                                                                                        tmp_path):
    """An offline `rebase` killed after the recomputed state replaced the streamed one, before its commit was
    logged; the next `rebase` finishes it at the recorded cut, reconciling against the state the pause recorded
    (not the replaced one, which would fold the records past the drained stream twice), and the paused version
    outlives vacuums until the new handoff has switched."""
    from switchyard.state_handoff import faults
    from switchyard.state_handoff.control import kept_versions

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=1.0)
    stream_until_caught_up(spark, tables, bootstrap)  # reads nothing: everything past the drained state is [K, C)
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 60, seed=43))
    killed = _cli(tables, bootstrap, "rebase", "--timeout", "600", env={faults.ENV: "backfill.after_state"})
    out, _ = killed.communicate(timeout=900)
    assert killed.returncode == -9, out
    paused = PipelineView.read(tables).ledger.paused_state_versions
    assert len(paused) == 1 and list(paused.values())[0] in kept_versions.kept_state_versions(PipelineView.read(tables))

    again, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")
    assert again == 0 and "Traceback" not in out, out
    committed = _handoffs(tables)[-1]
    assert details.of(committed).reconciliation["keys_different"] == 0, out
    stream_until_caught_up(spark, tables, bootstrap)
    assert PipelineView.read(tables).ledger.paused_state_versions == {}  # switched: released
    expected = assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)
    assert_accounting_identity(bootstrap, topic_name, tables, expected)


def test_the_reconciliation_takes_sums_added_in_another_order_as_equal(spark):
    """Amounts of 10^17 that cancel within a key leave its sum off by more than 1e-9 of it in one order of addition
    and not in another; the reconciliation bounds that by the key's count and the amounts' min and max. A missing
    event still differs (its count)."""
    from functools import reduce

    from switchyard.jobs.rebase.reconciliation import reconcile

    amounts = [1e17, 0.03, -1e17, 5.0]
    one_order = reduce(lambda a, b: a + b, amounts)  # (1e17 + 0.03) rounds to 1e17: 5.0
    another = reduce(lambda a, b: a + b, [amounts[0], amounts[2], amounts[1], amounts[3]])  # 5.03
    assert abs(one_order - another) > 1e-9 * abs(another)
    at = datetime(2026, 1, 2, 3, 4, 5)

    def state(total: float, count: int = 4):
        return spark.createDataFrame(
            [("k", count, total, -1e17, 1e17, at, "e4", at, 5.0), ("plain", 2, 3.5, 1.5, 2.0, at, "e9", at, 2.0)],
            "key STRING, event_count BIGINT, amount_sum DOUBLE, amount_min DOUBLE, amount_max DOUBLE, "
            "last_by_time TIMESTAMP, last_by_event_id STRING, last_event_time TIMESTAMP, last_amount DOUBLE")

    pipeline = get_pipeline("demo")
    assert reconcile(pipeline, state(one_order), state(another))["keys_different"] == 0
    assert reconcile(pipeline, state(one_order), state(one_order, count=5))["keys_different"] == 1
    plain = state(one_order).where("key = 'plain'")
    assert reconcile(pipeline, plain, plain.selectExpr("*", "amount_sum + 1e-6 AS s").drop("amount_sum")
                     .withColumnRenamed("s", "amount_sum"))["keys_different"] == 1
