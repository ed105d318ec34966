"""The reconciliation compares what each side holds: approximate distinct counts by their sketches' registers, not
by estimates that depend on the order values arrived and on how partial sketches were combined."""

from __future__ import annotations

from datetime import datetime

from pyspark.sql import functions as F

from switchyard.jobs.rebase.reconciliation import described, reconcile
from switchyard.state_handoff.language.spec import Field, Pipeline, approx_distinct, count

PIPELINE = Pipeline(name="ids", key="key", event_time="at", event_id="id",
                    fields=(Field("id", "string"), Field("key", "string"), Field("at", "timestamp")),
                    aggregations=(count("n"), approx_distinct("ids", "id")))
LAST = datetime(2026, 1, 1)


def _sketches(spark, values: dict[str, list[str]], pieces: int):
    """Per key, one sketch of its values: built in one pass (`pieces` 1), or as the union of `pieces` partial
    sketches, as a stream folds micro-batches and a backfill merges tiles."""
    rows = [(key, v, i % pieces) for key, vs in values.items() for i, v in enumerate(vs)]
    events = spark.createDataFrame(rows, "key STRING, id STRING, piece INT").coalesce(1)  # a piece is one pass
    partials = events.groupBy("key", "piece").agg(F.count(F.lit(1)).alias("n"),
                                                  F.hll_sketch_agg("id", 12).alias("ids"))
    return partials.groupBy("key").agg(F.sum("n").alias("n"), F.hll_union_agg("ids").alias("ids"),
                                       F.lit(LAST).alias("last_by_time"), F.lit("e").alias("last_by_event_id"))


def test_sketches_of_the_same_values_reconcile_however_they_were_combined(spark):
    ids = [f"order-{i}" for i in range(900)]
    few = [f"x{i}" for i in range(20)]  # still exact (coupon mode)
    streamed = _sketches(spark, {"big": ids, "small": few}, pieces=1)
    recomputed = _sketches(spark, {"big": list(reversed(ids)), "small": few}, pieces=9)
    estimates = {r.key: r.e for r in streamed.select("key", F.hll_sketch_estimate("ids").alias("e")).collect()}
    again = {r.key: r.e for r in recomputed.select("key", F.hll_sketch_estimate("ids").alias("e")).collect()}
    assert estimates["big"] != again["big"], "the two estimators disagree on identical registers"  # 889 and 882
    assert reconcile(PIPELINE, recomputed, streamed)["keys_different"] == 0

    others = ids[:800] + [f"order-{i}" for i in range(1000, 1100)]  # as many values, 100 of them others
    more = _sketches(spark, {"big": others, "small": few[:-1]}, pieces=3)
    found = reconcile(PIPELINE, recomputed, more)
    assert found["keys_different"] == 2, found
    line = described(found)
    assert "\n" not in line and 'key "big", column ids: recomputed "estimate ' in line, line
    assert 'key "small", column n: recomputed "20", streamed "19"' in line, line
