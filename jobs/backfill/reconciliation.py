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


def reconcile(pipeline: Pipeline, recomputed: DataFrame, streamed: DataFrame, examples: int = 5) -> dict:
    """How many keys' recomputed state differs from the streamed state (expected 0), with a few examples.
    Doubles compare to 1e-9 relative: the two phases add the same values in different orders; sketches by their
    estimates."""
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
