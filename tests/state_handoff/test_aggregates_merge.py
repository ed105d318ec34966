"""One definition of the merge: partials folded into a Delta table one batch at a time by MERGE (the stream's way)
end exactly where one groupBy over all of them ends (the batch's way), and where plain Python says they should.

The pipeline here exists only in this test: a nullable number field and a nullable label under every kind, and
events whose (event_time, event_id) pairs tie for the same key, with the ties and the absent values spread over
several batches.
"""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timedelta, timezone

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import TimestampType

from switchyard.jobs.aggregation import state_from_partials, tile_start, window_partials_merged
from switchyard.jobs.delta_txn import merge_once
from switchyard.state_handoff.language.aggregates import (event_aggregations, event_as_partial, final_columns,
                                                          flatten_last, merge_aggregations, merge_into_sql,
                                                          partial_columns, sketch_columns, union_sketches)
from switchyard.state_handoff.language.parsing import parse_events
from switchyard.state_handoff.language.spec import (Field, Pipeline, TumblingWindows, approx_distinct, count, first,
                                                    last, maximum, mean, minimum, stddev, total, variance)

AGGREGATIONS = (
    count("n"),
    total("reading_sum", "reading"),
    minimum("reading_min", "reading"),
    maximum("reading_max", "reading"),
    mean("reading_mean", "reading"),
    last("reading_last", "reading"),
    last("label_last", "label"),
    first("reading_first", "reading"),
    first("label_first", "label"),
)

PIPELINE = Pipeline(
    name="nullable_readings",
    key="key",
    event_time="ts",
    event_id="id",
    fields=(
        Field("id", "string", required=False),
        Field("key", "string"),
        Field("ts", "timestamp"),
        Field("reading", "number", required=False),
        Field("label", "string", required=False),
    ),
    aggregations=AGGREGATIONS,
    windows=TumblingWindows(size=timedelta(hours=1), allowed_lateness=timedelta(minutes=10),
                            aggregations=AGGREGATIONS),
)


def _event(key, minute, id_, reading=None, label=None):
    """None leaves the field out of the JSON. Readings are multiples of 1/4, so sums are exact in any order."""
    return {"key": key, "ts": f"2024-03-01T{10 + minute // 60:02d}:{minute % 60:02d}:00Z", "id": id_,
            "reading": reading, "label": label}


BATCHES = [
    [
        _event("a", 5, "e1", 2.5, "x"),
        _event("b", 40, "e9", 9.0, "p"),
        _event("c", 20, None, 1.0, "r"),
        _event("d", 0, "d1"),
        _event("e", 10, "e1"),
        _event("g", 30, "g1", 1.0, "s"),
    ],
    [
        _event("a", 5, "e1", 7.25, "y"),          # ties a's first event; the greater reading wins, though later
        _event("b", 40, "e9", 9.0, "o"),          # ties b's first event on reading too; label "p" > "o" keeps it
        _event("b", 75, "k", 4.0, "m"),
        _event("c", 20, None),                    # ties on (ts, NULL id) with nothing else: NULLs rank lowest
        _event("c", 10, "c1", 2.0),
        _event("e", 12, "e2", 5.0),               # a NULL partial sum on one side, 5 on the other
        _event("f", 150, "f1", 0.5, "only"),      # a window seen once: the MERGE inserts it
        _event("g", 30, "g1", None, "t"),         # ties g's oldest event: an absent reading ranks lowest, so first
    ],
    [
        _event("a", 5, "e1", None, "z"),          # a tie whose reading is absent loses to any reading
        _event("a", 1, "e0", -1.5, "w"),
        _event("b", 40, "e9", 3.0, "q"),          # a tie with a smaller reading, after the greater one
        _event("b", 75, "k", 4.0, "n"),           # equal time, id and reading: the label decides
        _event("d", 59, "d2"),                    # d's readings are all absent: sums NULL, count 0
        _event("e", 11, "e3"),
        _event("g", 30, None, 5.0),               # at the same time without an id: NULL lowest, the first now
    ],
]

WINDOWS = ("key", "window_start")
KEYED = ("key",)


def _parsed(spark, batch: list[dict], pipeline: Pipeline = PIPELINE) -> DataFrame:
    values = [json.dumps({k: v for k, v in event.items() if v is not None}).encode() for event in batch]
    records = spark.createDataFrame([(bytearray(v),) for v in values], "value BINARY")
    return parse_events(pipeline, records).where("error IS NULL").withColumn("window_start", tile_start(pipeline))


def _partials(events: DataFrame, grain: tuple[str, ...], keyed: bool, pipeline: Pipeline = PIPELINE) -> DataFrame:
    aggs = pipeline.aggregations if keyed else pipeline.windows.aggregations
    return (events.groupBy(*grain).agg(*event_aggregations(pipeline, aggs, keyed=keyed))
            .select(*grain, *flatten_last(aggs, keyed=keyed)))


def _folded_by_merge(spark, path: str, batches: list[DataFrame], grain: tuple[str, ...], keyed: bool) -> DataFrame:
    """The stream's way: a delta-rs MERGE per batch, matched rows folded with merge_into_sql, new ones inserted,
    each once (a batch merged again is skipped by its transaction id)."""
    from deltalake import DeltaTable

    aggs = PIPELINE.aggregations if keyed else PIPELINE.windows.aggregations
    batches[0].limit(0).write.format("delta").save(path)
    table = DeltaTable(path)
    matched = " AND ".join(f't."{c}" = s."{c}"' for c in grain)
    for batch_id, partials in enumerate(batches):
        arrow = partials.toArrow()
        assert merge_once(table, arrow, matched, "fold", batch_id, updates=merge_into_sql(aggs, keyed=keyed))
        assert not merge_once(table, arrow, matched, "fold", batch_id, updates=merge_into_sql(aggs, keyed=keyed))
    return spark.read.format("delta").load(path)


def _rows(df: DataFrame, grain: tuple[str, ...], keyed: bool) -> list[tuple]:
    """Rows in a fixed column order, timestamps as epoch microseconds, sorted by the grain."""
    aggs = PIPELINE.aggregations if keyed else PIPELINE.windows.aggregations
    names = [*grain, *partial_columns(aggs, keyed=keyed)]
    types = {f.name: f.dataType for f in df.schema.fields}
    cols = [F.unix_micros(F.col(n)).alias(n) if isinstance(types[n], TimestampType) else F.col(n) for n in names]
    return sorted(tuple(row) for row in df.select(*cols).collect())


# ---------------------------------------------------------------- the plain-Python oracle

def _micros(ts: str) -> int:
    instant = datetime.strptime(ts, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    return int(instant.timestamp()) * 1_000_000


def _nulls_first(value):
    return (0,) if value is None else (1, value)


def _expected(keyed: bool) -> list[tuple]:
    groups = defaultdict(list)
    for event in (e for batch in BATCHES for e in batch):
        hour = _micros(event["ts"]) // 3_600_000_000 * 3_600_000_000
        groups[(event["key"],) if keyed else (event["key"], hour)].append(event)
    rows = []
    for grain, events in groups.items():
        readings = [e["reading"] for e in events if e["reading"] is not None]
        total_ = sum(readings) if readings else None
        def order(e):
            return tuple(_nulls_first(v) for v in (_micros(e["ts"]), e["id"], e["reading"], e["label"]))

        newest, oldest = max(events, key=order), min(events, key=order)
        rows.append((*grain, len(events), total_, min(readings, default=None), max(readings, default=None),
                     total_, len(readings), _micros(newest["ts"]), newest["id"], newest["reading"],
                     newest["label"], _micros(oldest["ts"]), oldest["id"], oldest["reading"], oldest["label"]))
    return sorted(rows)


# ---------------------------------------------------------------- tests

def test_merge_into_sql_sets_every_partial_column():
    for aggs, keyed in ((PIPELINE.windows.aggregations, False), (PIPELINE.aggregations, True),
                        ((count("n"), total("s", "reading")), False)):
        assert list(merge_into_sql(aggs, keyed=keyed)) == partial_columns(aggs, keyed=keyed)


def test_the_batches_straddle_ties_and_nulls():
    """Guards the data: without ties and NULLs across batches the comparison below proves little."""
    def seen(event):
        return [i for i, batch in enumerate(BATCHES) if any(
            (e["key"], e["ts"], e["id"]) == (event["key"], event["ts"], event["id"]) for e in batch)]

    tied = [e for batch in BATCHES for e in batch if len(seen(e)) > 1]
    assert {e["key"] for e in tied} >= {"a", "b", "c"}
    assert any(e["id"] is None for e in tied)
    assert any(e["reading"] is None for e in tied)


@pytest.mark.parametrize("keyed", [False, True], ids=["windows", "keyed"])
def test_merge_in_batches_equals_the_batch_merge(spark, tmp_path, keyed):
    grain = KEYED if keyed else WINDOWS
    events = [_parsed(spark, batch) for batch in BATCHES]
    assert [e.count() for e in events] == [len(b) for b in BATCHES]
    partials = [_partials(e, grain, keyed) for e in events]

    all_partials = partials[0].unionByName(partials[1]).unionByName(partials[2])
    if keyed:
        batch_merged = state_from_partials(PIPELINE, all_partials)
    else:
        batch_merged = window_partials_merged(PIPELINE, all_partials.drop("window_end"))
    in_one_pass = _partials(events[0].unionByName(events[1]).unionByName(events[2]), grain, keyed)
    folded = _folded_by_merge(spark, str(tmp_path / "state"), partials, grain, keyed)

    expected = _expected(keyed)
    assert _rows(in_one_pass, grain, keyed) == expected
    assert _rows(batch_merged, grain, keyed) == expected
    assert _rows(folded, grain, keyed) == expected


def test_merge_aggregations_reads_prefixed_partials(spark):
    """A prefix names the partial columns, not the fields of the `last` struct that flatten_last reads."""
    aggs = PIPELINE.windows.aggregations
    partials = _partials(_parsed(spark, BATCHES[1]), WINDOWS, keyed=False)
    prefixed = partials.select(*WINDOWS, *[F.col(c).alias("w__" + c) for c in partial_columns(aggs)])
    merged = (prefixed.groupBy(*WINDOWS).agg(*merge_aggregations(aggs, "w__"))
              .select(*WINDOWS, *flatten_last(aggs, "w__"))
              .withColumnsRenamed({"w__" + c: c for c in partial_columns(aggs)}))
    assert _rows(merged, WINDOWS, keyed=False) == _rows(partials, WINDOWS, keyed=False)


SPREAD = Pipeline(
    name="spread", key="key", event_time="ts", event_id="id", fields=PIPELINE.fields,
    aggregations=(variance("reading_var", "reading"), stddev("reading_sd", "reading")),
    windows=TumblingWindows(size=timedelta(hours=1), allowed_lateness=timedelta(minutes=10),
                            aggregations=(variance("reading_var", "reading"),)))


def _spread_rows(df: DataFrame, keyed: bool) -> dict:
    grain = KEYED if keyed else WINDOWS
    aggs = SPREAD.aggregations if keyed else SPREAD.windows.aggregations
    names = [f"{a.name}__{p}" for a in aggs for p in ("count", "sum", "m2")]
    df = df.select(*grain, *names, *final_columns(aggs))
    if not keyed:
        df = df.withColumn("window_start", F.unix_micros("window_start"))
    return {tuple(r[g] for g in grain): r for r in df.collect()}


@pytest.mark.parametrize("keyed", [False, True], ids=["windows", "keyed"])
def test_variance_merges_alike_by_groupby_by_merge_and_from_events(spark, tmp_path, keyed):
    """A variance's partials (count, sum, M2) from the events at once, merged over batches by one groupBy (Chan's
    formula over many rows) and folded batch by batch by MERGE (Chan's pairwise formula) all give Python's
    statistics over the same readings; fewer than two readings give null, absent readings are skipped."""
    import statistics

    grain = KEYED if keyed else WINDOWS
    aggs = SPREAD.aggregations if keyed else SPREAD.windows.aggregations

    def parsed(batch):
        return _parsed(spark, batch, SPREAD)

    def partials(events):
        return _partials(events, grain, keyed, SPREAD)

    batches = [partials(parsed(b)) for b in BATCHES]
    merged = batches[0].unionByName(batches[1]).unionByName(batches[2]).groupBy(*grain).agg(
        *merge_aggregations(aggs, keyed=keyed)).select(*grain, *flatten_last(aggs, keyed=keyed))
    folded_path = str(tmp_path / "spread")
    batches[0].limit(0).write.format("delta").save(folded_path)
    from deltalake import DeltaTable

    table = DeltaTable(folded_path)
    matched = " AND ".join(f't."{c}" = s."{c}"' for c in grain)
    for batch_id, batch in enumerate(batches):
        assert merge_once(table, batch.toArrow(), matched, "spread", batch_id,
                          updates=merge_into_sql(aggs, keyed=keyed))
    folded = spark.read.format("delta").load(folded_path)

    readings = defaultdict(list)
    for event in (e for batch in BATCHES for e in batch):
        hour = _micros(event["ts"]) // 3_600_000_000 * 3_600_000_000
        if event["reading"] is not None:
            readings[(event["key"],) if keyed else (event["key"], hour)].append(event["reading"])
        else:
            readings.setdefault((event["key"],) if keyed else (event["key"], hour), [])
    for way in (partials(parsed([e for b in BATCHES for e in b])), merged, folded):
        rows = _spread_rows(way, keyed)
        assert set(rows) == set(readings)
        for grain_key, values in readings.items():
            row = rows[grain_key]
            assert row["reading_var__count"] == len(values)
            want = statistics.variance(values) if len(values) > 1 else None
            assert (row["reading_var"] is None) == (want is None), (grain_key, row)
            if want is not None:
                assert row["reading_var"] == pytest.approx(want, rel=1e-12, abs=1e-12), grain_key
                if keyed:
                    assert row["reading_sd"] == pytest.approx(want ** 0.5, rel=1e-12, abs=1e-12)
    assert any(len(v) > 2 for v in readings.values()) and any(len(v) == 1 for v in readings.values())


DISTINCT = Pipeline(
    name="distinct", key="key", event_time="ts", event_id="id", fields=PIPELINE.fields,
    aggregations=(approx_distinct("labels", "label"), count("n")),
    windows=TumblingWindows(size=timedelta(hours=1), allowed_lateness=timedelta(minutes=10),
                            aggregations=(approx_distinct("labels", "label"),)))


@pytest.mark.parametrize("keyed", [False, True], ids=["windows", "keyed"])
def test_approx_distinct_sketches_union_alike_every_way(spark, tmp_path, keyed):
    """An approximate distinct count's sketches from the events at once, unioned over batches by one groupBy, folded
    batch by batch by a delta-rs MERGE whose source carries its union with the target (the `datasketches`
    package's, read and written in Spark's format), and, keyed, the stream's way (events as values beside the seeded
    sketches) all estimate Python's count of distinct labels, exactly at these sizes; NULL labels are not counted
    and a key without labels counts 0."""
    from deltalake import DeltaTable

    grain = KEYED if keyed else WINDOWS
    aggs = DISTINCT.aggregations if keyed else DISTINCT.windows.aggregations

    def parsed(batch):
        return _parsed(spark, batch, DISTINCT)

    def partials(events):
        return _partials(events, grain, keyed, DISTINCT)

    def merged(rows, events=False):
        return rows.groupBy(*grain).agg(*merge_aggregations(aggs, keyed=keyed, events=events)).select(
            *grain, *flatten_last(aggs, keyed=keyed))

    batches = [partials(parsed(b)) for b in BATCHES]
    grouped = merged(batches[0].unionByName(batches[1]).unionByName(batches[2]))
    path = str(tmp_path / "distinct")
    batches[0].limit(0).write.format("delta").save(path)
    table = DeltaTable(path)
    sketches = sketch_columns(aggs)
    for batch_id, batch in enumerate(batches):
        source = batch.toArrow()
        table.update_incremental()
        target = {tuple(r[g] for g in grain): r for r in table.to_pyarrow_table().to_pylist()}
        source = union_sketches(source, target, list(grain), sketches)
        assert merge_once(table, source, " AND ".join(f't."{c}" = s."{c}"' for c in grain), "distinct", batch_id,
                          updates=merge_into_sql(aggs, keyed=keyed))
    ways = {"events at once": partials(parsed([e for b in BATCHES for e in b])), "groupBy": grouped,
            "MERGE": spark.read.format("delta").load(path)}
    if keyed:  # the seed (batch 0's sketches) beside the later batches' events
        events = parsed(BATCHES[1] + BATCHES[2]).select(*grain, *event_as_partial(DISTINCT, aggs, keyed=True))
        ways["stream"] = merged(events.unionByName(batches[0], allowMissingColumns=True), events=True)

    labels = defaultdict(set)
    for event in (e for batch in BATCHES for e in batch):
        hour = _micros(event["ts"]) // 3_600_000_000 * 3_600_000_000
        grain_key = (event["key"],) if keyed else (event["key"], hour)
        labels[grain_key].update([event["label"]] if event["label"] is not None else [])
    assert any(not v for v in labels.values()) and any(len(v) > 2 for v in labels.values())
    for way, df in ways.items():
        df = df.select(*grain, *final_columns(aggs[:1]))
        if not keyed:
            df = df.withColumn("window_start", F.unix_micros("window_start"))
        got = {tuple(r[g] for g in grain): r["labels"] for r in df.collect()}
        assert got == {k: len(v) for k, v in labels.items()}, way
