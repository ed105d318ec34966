"""A backfill at a stream's cut checks itself: the recomputed keyed state against the streamed state."""

from __future__ import annotations

from functools import reduce
from operator import and_

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from state_handoff.aggregates import partial_columns
from state_handoff.spec import Pipeline


def _shown_key(keys: list) -> F.Column:
    """A key as the reconciliation's examples show it: its value, or a composite key's fields as JSON."""
    return (keys[0] if len(keys) == 1 else F.to_json(F.struct(*keys))).alias("key")


UNIT_ROUNDOFF = 2.0 ** -53


def _reordering_bound(pipeline: Pipeline, name: str) -> F.Column | None:
    """How far two sums of the same doubles may lie apart, added in two orders: 2·n²·u·max|x| (each order is off
    by at most (n-1)·u·Σ|x|, and Σ|x| ≤ n·max|x|). Known when the pipeline keeps a count of the key's events (at
    least the values summed) and the summed column's min and max; amounts of 10^15 and more that cancel within a
    key move a sum by far more than 1e-9 of it."""
    summed = next((a.column for a in pipeline.aggregations if a.kind == "sum" and a.name == name), None)
    counted = next((a.name for a in pipeline.aggregations if a.kind == "count"), None)
    bounds = [a.name for a in pipeline.aggregations if a.kind in ("min", "max") and a.column == summed]
    if summed is None or counted is None or len(bounds) < 2:
        return None
    n = F.greatest(F.col(f"r.`{counted}`"), F.col(f"s.`{counted}`")).cast("double")
    largest = F.greatest(*(F.abs(F.col(f"{side}.`{b}`")) for side in ("r", "s") for b in bounds))
    return F.lit(2 * UNIT_ROUNDOFF) * n * n * largest


def reconcile(pipeline: Pipeline, recomputed: DataFrame, streamed: DataFrame, examples: int = 5) -> dict:
    """How many keys' recomputed state differs from the streamed state (expected 0), with a few examples.
    Doubles compare to 1e-9 relative, sums to their reordering bound when that is larger: the two phases add the
    same values in different orders; sketches by their estimates."""
    keys = pipeline.keys
    columns = partial_columns(pipeline.aggregations, keyed=True)
    types = dict(recomputed.dtypes)
    r, s = F.col("r.__present"), F.col("s.__present")
    differs = r.isNull() | s.isNull()
    for c in columns:
        a, b = F.col(f"r.`{c}`"), F.col(f"s.`{c}`")
        if types[c] == "binary":  # HLL sketches: the same values however the unions ran give the same estimate
            differs = differs | ~F.hll_sketch_estimate(a).eqNullSafe(F.hll_sketch_estimate(b))
        elif types[c] in ("double", "float"):
            tolerance = F.greatest(F.lit(1.0), F.abs(a), F.abs(b)) * F.lit(1e-9)
            reordering = _reordering_bound(pipeline, c)
            if reordering is not None:
                tolerance = F.greatest(tolerance, F.coalesce(reordering, tolerance))
            differs = differs | ~(a.eqNullSafe(b) | (F.abs(a - b) <= tolerance))
        else:
            differs = differs | ~a.eqNullSafe(b)
    joined = (recomputed.withColumn("__present", F.lit(True)).alias("r")
              .join(streamed.select(*keys, *columns).withColumn("__present", F.lit(True)).alias("s"),
                    reduce(and_, [F.col(f"r.`{k}`") == F.col(f"s.`{k}`") for k in keys]), "full_outer")
              .where(differs)
              .select(_shown_key([F.coalesce(F.col(f"r.`{k}`"), F.col(f"s.`{k}`")).alias(k) for k in keys]),
                      F.to_json(F.struct(*[F.col(f"r.`{c}`").alias(c) for c in columns])).alias("recomputed"),
                      F.to_json(F.struct(*[F.col(f"s.`{c}`").alias(c) for c in columns])).alias("streamed"))
              .persist(StorageLevel.DISK_ONLY))
    try:
        different = joined.count()
        shown = [row.asDict() for row in joined.limit(examples).collect()] if different else []
    finally:
        joined.unpersist()
    return {"keys_different": different, "keys_recomputed": recomputed.count(), "examples": shown}
