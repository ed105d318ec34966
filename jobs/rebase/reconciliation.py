"""A backfill at a stream's cut checks itself: the recomputed keyed state against the streamed state (a rebase's step
between the merge at the cut and anything the cut replaces: jobs/rebase/at_cut.py)."""

from __future__ import annotations

import dataclasses
import json
from functools import reduce
from operator import and_

from pyspark import StorageLevel
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from switchyard.jobs.aggregation import state_from_partials
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.aggregates import HLL_LG_K, partial_columns
from switchyard.state_handoff.language.definition import DefinitionChange
from switchyard.state_handoff.language.spec import Field, Pipeline

ALL_KEYS = "switchyard_all_keys"  # the one key of a state merged over all its keys


def over_all_keys(pipeline: Pipeline) -> Pipeline:
    """`pipeline` keyed by one constant: what two states keyed by different fields are compared by (a redeploy to
    another key), each merged over all its keys."""
    return dataclasses.replace(pipeline, key=ALL_KEYS, fields=(Field(ALL_KEYS, "string"), *pipeline.fields))


def merged_over_all_keys(pipeline: Pipeline, partials: DataFrame) -> DataFrame:
    """Rows of keyed partials (of any key) merged into one: a count's total, a sum's, the smallest minimum, the
    newest `last`, one sketch of every distinct value, ..."""
    columns = partial_columns(pipeline.aggregations, keyed=True)
    return state_from_partials(over_all_keys(pipeline), partials.select(F.lit("all").alias(ALL_KEYS), *columns))


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


# DataSketches' HLL image (the same from Spark and the `datasketches` package): byte 7 holds the mode in its low two
# bits and the target type in the next two; an HLL-mode HLL_8 image has a 40-byte preamble, then one byte per register.
_HLL8_IN_HLL_MODE = 2 | 2 << 2
_PREAMBLE = 40


def _registers(sketch: F.Column) -> F.Column:
    """An HLL_8 sketch's registers (null for a sketch still in its exact coupon mode, or of another type)."""
    mode = F.conv(F.hex(F.substring(sketch, 8, 1)), 16, 10).cast("int")
    return F.when(mode.bitwiseAND(F.lit(15)) == _HLL8_IN_HLL_MODE,
                  F.substring(sketch, _PREAMBLE + 1, 1 << HLL_LG_K))


def _sketches_differ(a: F.Column, b: F.Column) -> F.Column:
    """Two sketches hold different values: by their registers in HLL mode, where the estimate also depends on the
    order the values arrived and on how sketches were combined (HIP against the composite estimator: 899.27 against
    909.87 for identical registers); by their estimates in the exact coupon modes, which the coupons alone decide."""
    ra, rb = _registers(a), _registers(b)
    by_estimate = ~F.hll_sketch_estimate(a).eqNullSafe(F.hll_sketch_estimate(b))
    return F.when(ra.isNotNull() & rb.isNotNull(), ra != rb).otherwise(by_estimate)


def _shown(column: F.Column, binary: bool) -> F.Column:
    """A column's value as the reconciliation shows it: a sketch as its estimate, anything else as Spark's text."""
    return F.concat(F.lit("estimate "), F.hll_sketch_estimate(column).cast("string")) if binary \
        else column.cast("string")


def reconcile(pipeline: Pipeline, recomputed: DataFrame, streamed: DataFrame, examples: int = 5) -> dict:
    """How many keys' recomputed state differs from the streamed state (expected 0), with a few examples: per key,
    the first column that differs and both values. Doubles compare to 1e-9 relative, sums to their reordering bound
    when that is larger: the two phases add the same values in different orders; sketches by what they hold."""
    keys = pipeline.keys
    columns = partial_columns(pipeline.aggregations, keyed=True)
    types = dict(recomputed.dtypes)
    r, s = F.col("r.__present"), F.col("s.__present")
    first_difference = F.when(r.isNull() | s.isNull(), F.struct(
        F.lit("(key)").alias("column"), F.when(r.isNull(), F.lit("absent")).otherwise(F.lit("present")).alias("r"),
        F.when(s.isNull(), F.lit("absent")).otherwise(F.lit("present")).alias("s")))
    differs = r.isNull() | s.isNull()
    for c in columns:
        a, b = F.col(f"r.`{c}`"), F.col(f"s.`{c}`")
        if types[c] == "binary":  # HLL sketches
            differ = _sketches_differ(a, b)
        elif types[c] in ("double", "float"):
            tolerance = F.greatest(F.lit(1.0), F.abs(a), F.abs(b)) * F.lit(1e-9)
            reordering = _reordering_bound(pipeline, c)
            if reordering is not None:
                tolerance = F.greatest(tolerance, F.coalesce(reordering, tolerance))
            differ = ~(a.eqNullSafe(b) | (F.abs(a - b) <= tolerance))
        else:
            differ = ~a.eqNullSafe(b)
        differs = differs | differ
        binary = types[c] == "binary"
        first_difference = first_difference.when(differ, F.struct(
            F.lit(c).alias("column"), _shown(a, binary).alias("r"), _shown(b, binary).alias("s")))
    joined = (recomputed.withColumn("__present", F.lit(True)).alias("r")
              .join(streamed.select(*keys, *columns).withColumn("__present", F.lit(True)).alias("s"),
                    reduce(and_, [F.col(f"r.`{k}`") == F.col(f"s.`{k}`") for k in keys]), "full_outer")
              .where(differs)
              .select(_shown_key([F.coalesce(F.col(f"r.`{k}`"), F.col(f"s.`{k}`")).alias(k) for k in keys]),
                      first_difference.alias("first"))
              .select("key", F.col("first.column").alias("column"), F.col("first.r").alias("recomputed"),
                      F.col("first.s").alias("streamed"))
              .persist(StorageLevel.DISK_ONLY))
    try:
        different = joined.count()
        shown = [row.asDict() for row in joined.orderBy("key").limit(examples).collect()] if different else []
    finally:
        joined.unpersist()
    return {"keys_different": different, "keys_recomputed": recomputed.count(), "examples": shown}


def described(reconciliation: dict, examples: int = 2) -> str:
    """A reconciliation's examples in one line, each value in full: key 'k', column amount_sum: recomputed 12.5,
    streamed 12.25."""
    def one(x: dict) -> str:
        return (f"key {json.dumps(x['key'], ensure_ascii=False)}, column {x['column']}: recomputed "
                f"{json.dumps(x['recomputed'], ensure_ascii=False)}, streamed {json.dumps(x['streamed'], ensure_ascii=False)}")

    shown = reconciliation.get("examples") or []
    more = reconciliation.get("keys_different", len(shown)) - min(examples, len(shown))
    return "; ".join(one(x) for x in shown[:examples]) + (f"; and {more} more" if more > 0 else "")


NOT_COMPARED = "its records parse otherwise under the changed definition"


def reconcile_at_cut(change: DefinitionChange, recomputed: DataFrame, streamed: DataFrame | None) -> dict:
    """The recomputed state at a cut against the `streamed` one there, on what `change` compares: the aggregations
    both definitions declare alike, over all keys at once when the key changed; nothing compared when records parse
    otherwise (the two states hold other records), the keys recomputed counted."""
    if change.reparsed:
        return {"keys_different": 0, "keys_recomputed": recomputed.count(), "examples": [],
                "not_compared": NOT_COMPARED}
    if change.key_changed:
        return reconcile(over_all_keys(change.compared), merged_over_all_keys(change.compared, recomputed), streamed)
    return reconcile(change.compared, recomputed, streamed)


class ReconciliationFailed(UserError):
    """The state recomputed at the cut differs from the streamed state there, and nobody accepted it."""

    def __init__(self, pipeline: str, reconciliation: dict, resumable: bool):
        self.reconciliation, self.resumable = reconciliation, resumable
        super().__init__(
            f"rebase of {pipeline} stopped: {reconciliation['keys_different']} of {reconciliation['keys_recomputed']} "
            f"keys differ between the streamed and the recomputed state at the cut ({described(reconciliation)}); "
            "nothing was replaced; find the cause, or rerun with --accept-differences to replace the streamed state anyway")
