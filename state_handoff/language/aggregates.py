"""The aggregate algebra: per-record partials, their merge, and finalization, as Spark columns.

Every aggregation is a mergeable partial, so day tiles merge into state and state merges with a
micro-batch through the same expressions. All `last` aggregations share one ordering,
(event_time, event_id), carried as `last_by_time` / `last_by_event_id`; a tie on that pair goes to
the greatest values, the way a max over the whole struct breaks it. All `first` aggregations share its mirror,
`first_by_time` / `first_by_event_id` under min: a tie goes to the smallest values, NULL lowest (an event without
an id comes first among events at the same time).
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from switchyard.state_handoff.language.spec import Aggregation, Pipeline

LAST_BY_TIME = "last_by_time"
LAST_BY_ID = "last_by_event_id"
FIRST_BY_TIME = "first_by_time"
FIRST_BY_ID = "first_by_event_id"
_LAST = "__last"
_FIRST = "__first"
WINDOW_PREFIX = "window_"


# How partials combine, declared once per kind. Each rule has two forms that agree: the aggregate over
# many partial rows (a groupBy merge) and the fold of a source row into a target row (a MERGE, _FOLD_SQL). They
# agree because Spark's Sum, Min and Max update by exactly these folds: a NULL-skipping +, least,
# greatest. The `last` fields combine as one struct (time, id, values...) under max. A variance's partials are
# (count, sum, M2), M2 the sum of squared deviations from the partial's own mean: count and sum add up, and M2
# merges by Chan's formula (the "chan" rule, which reads its siblings). An approximate distinct count's partial is
# an HLL sketch (Apache DataSketches' binary form, the same in Spark and the `datasketches` package): sketches
# combine by union (the "hll" rule), which no SQL of a delta-rs MERGE can do, so a MERGE's source carries the
# union already (union_sketches).
_KIND_COMBINES = {"count": "sum", "sum": "sum", "mean": "sum", "min": "min", "max": "max", "last": "max",
                  "first": "min", "variance": "sum", "stddev": "sum", "approx_distinct": "hll"}
HLL_LG_K = 12  # 4096 registers: a relative standard error of 1.04 / 64 = 1.6%
# An event's value for a sketch, beside its (NULL) sketch in the stream's partial rows: Spark has no scalar that
# makes a sketch of one value, so the stream's aggregation sketches these values and unions them with the sketches.
_SKETCH_VALUE = "__value"
_SPREAD = ("variance", "stddev")
_STRUCTS = ("last", "first")  # the kinds that combine inside a struct ordered by (event_time, event_id)
_OVER_ROWS = {"sum": F.sum, "min": F.min, "max": F.max, "hll": F.hll_union_agg}


def _partial_names(agg: Aggregation) -> list[str]:
    if agg.kind == "mean":
        return [f"{agg.name}__sum", f"{agg.name}__count"]
    if agg.kind in _SPREAD:
        return [f"{agg.name}__count", f"{agg.name}__sum", f"{agg.name}__m2"]
    return [agg.name]


def partial_names(agg: Aggregation) -> list[str]:
    """The partial columns one aggregation keeps (a `last` or `first` value among its struct's fields), by its name."""
    return _partial_names(agg)


def _ordered(aggs: tuple[Aggregation, ...], keyed: bool) -> bool:
    """Keyed partials always carry the newest (event_time, event_id): it gives the watermark too."""
    return keyed or any(agg.kind == "last" for agg in aggs)


def _combined(aggs: tuple[Aggregation, ...]) -> list[tuple[str, str]]:
    """(partial column, rule) for every partial outside the `last` and `first` structs."""
    return [(name, "chan" if name.endswith("__m2") and agg.kind in _SPREAD else _KIND_COMBINES[agg.kind])
            for agg in aggs if agg.kind not in _STRUCTS for name in _partial_names(agg)]


def _ordered_fields(aggs: tuple[Aggregation, ...], keyed: bool) -> list[str]:
    """The partial columns that combine as one struct under max, compared field by field in this order."""
    lasts = [agg.name for agg in aggs if agg.kind == "last"]
    return [LAST_BY_TIME, LAST_BY_ID, *lasts] if _ordered(aggs, keyed) else []


def _first_fields(aggs: tuple[Aggregation, ...]) -> list[str]:
    """The partial columns that combine as one struct under min, compared field by field in this order."""
    firsts = [agg.name for agg in aggs if agg.kind == "first"]
    return [FIRST_BY_TIME, FIRST_BY_ID, *firsts] if firsts else []


def partial_columns(aggs: tuple[Aggregation, ...], keyed: bool = False) -> list[str]:
    return [name for name, _ in _combined(aggs)] + _ordered_fields(aggs, keyed) + _first_fields(aggs)


def _from_events(agg: Aggregation, prefix: str) -> list[Column]:
    col = F.col(agg.column) if agg.column else None
    name = prefix + agg.name
    return {
        "count": lambda: [F.count(F.lit(1)).alias(name)],
        "sum": lambda: [F.sum(col).alias(name)],
        "min": lambda: [F.min(col).alias(name)],
        "max": lambda: [F.max(col).alias(name)],
        "mean": lambda: [F.sum(col).alias(f"{name}__sum"), F.count(col).alias(f"{name}__count")],
        # Spark's var_pop updates by Welford's method: M2 = var_pop * count, stable however large the mean
        "variance": lambda: [F.count(col).alias(f"{name}__count"), F.sum(col).alias(f"{name}__sum"),
                             (F.var_pop(col) * F.count(col)).alias(f"{name}__m2")],
        "approx_distinct": lambda: [F.hll_sketch_agg(col.cast("string"), HLL_LG_K).alias(name)],
    }["variance" if agg.kind in _SPREAD else agg.kind]()


def event_aggregations(pipeline: Pipeline, aggs: tuple[Aggregation, ...], prefix: str = "",
                       keyed: bool = False) -> list[Column]:
    """Aggregate expressions over parsed events, producing partial columns (named with `prefix`)."""
    exprs = [e for agg in aggs if agg.kind not in _STRUCTS for e in _from_events(agg, prefix)]
    lasts = [agg for agg in aggs if agg.kind == "last"]
    if _ordered(aggs, keyed):
        order = F.struct(F.col(pipeline.event_time).alias(LAST_BY_TIME), F.col(pipeline.event_id).alias(LAST_BY_ID),
                         *[F.col(a.column).alias(a.name) for a in lasts])
        exprs.append(F.max(order).alias(prefix + _LAST))
    firsts = [agg for agg in aggs if agg.kind == "first"]
    if firsts:
        order = F.struct(F.col(pipeline.event_time).alias(FIRST_BY_TIME), F.col(pipeline.event_id).alias(FIRST_BY_ID),
                         *[F.col(a.column).alias(a.name) for a in firsts])
        exprs.append(F.min(order).alias(prefix + _FIRST))
    return exprs


def merge_aggregations(aggs: tuple[Aggregation, ...], prefix: str = "", keyed: bool = False,
                       events: bool = False) -> list[Column]:
    """Aggregate expressions over partial rows, producing the same partial columns; `events`: the rows include
    events as event_as_partial makes them, whose sketches are still values."""
    def over_rows(name: str, rule: str) -> Column:
        if rule == "chan":
            return _chan_over_rows(prefix, name)
        merged = _OVER_ROWS[rule](F.col(prefix + name))
        if rule == "hll" and events:
            merged = F.hll_union(merged, F.hll_sketch_agg(F.col(prefix + name + _SKETCH_VALUE), HLL_LG_K))
        return merged

    exprs = [over_rows(name, rule).alias(prefix + name) for name, rule in _combined(aggs)]
    for kind, fields, struct in (("last", _ordered_fields(aggs, keyed), _LAST), ("first", _first_fields(aggs), _FIRST)):
        if fields:
            order = F.struct(*[F.col(prefix + name).alias(name) for name in fields])
            exprs.append(_OVER_ROWS[_KIND_COMBINES[kind]](order).alias(prefix + struct))
    return exprs


def _chan_over_rows(prefix: str, m2: str) -> Column:
    """Chan's merge of many partials (n_i, s_i, M2_i): M2 = sum M2_i + sum s_i^2 / n_i - (sum s_i)^2 / sum n_i,
    null while no value was seen."""
    base = prefix + m2[: -len("__m2")]
    n, s = F.col(f"{base}__count"), F.col(f"{base}__sum")
    between = F.sum(F.when(n > 0, s * s / n)) - F.sum(s) * F.sum(s) / F.sum(n)
    return F.when(F.sum(n) > 0, F.coalesce(F.sum(F.col(prefix + m2)), F.lit(0.0)) + F.greatest(between, F.lit(0.0)))


def _chan_fold_sql(t, s, m2: str) -> str:
    """Chan's pairwise merge of the source's (n, s, M2) into the target's, as a MERGE sets it."""
    base = m2[: -len("__m2")]
    tn, ts, tm = t(f"{base}__count"), t(f"{base}__sum"), t(m2)
    sn, ss, sm = s(f"{base}__count"), s(f"{base}__sum"), s(m2)
    delta = f"({ts} / CAST({tn} AS DOUBLE) - {ss} / CAST({sn} AS DOUBLE))"
    return (f"CASE WHEN {tn} IS NULL OR {tn} = 0 THEN {sm} WHEN {sn} IS NULL OR {sn} = 0 THEN {tm} "
            f"ELSE {tm} + {sm} + {delta} * {delta} * CAST({tn} AS DOUBLE) * CAST({sn} AS DOUBLE) "
            f"/ CAST({tn} + {sn} AS DOUBLE) END")


_FOLD_SQL = {"sum": "coalesce({t} + {s}, {t}, {s})", "min": "least({t}, {s})", "max": "greatest({t}, {s})"}


def merge_into_sql(aggs: tuple[Aggregation, ...], target: str = "t", source: str = "s",
                   keyed: bool = False) -> dict[str, str]:
    """For a delta-rs MERGE's when_matched_update: each partial column, the source row folded into the target
    row, as SQL (DataFusion, whose least and greatest skip NULLs as Spark's do).

    Pairwise the same combination as merge_aggregations, so folding partials in one batch at a time ends
    where one groupBy over all of them does: NULL + 5 = 5, and a tie on (event_time, event_id) goes to
    the greatest values.

    A sketch is set from the source, which must carry its union with the target's already (union_sketches).

    The `last` fields move together when the source's (time, id, values...) is the greater, compared field by
    field with NULL lowest: Spark's greatest over the two structs; the `first` fields when it is the lesser."""
    def q(alias: str, name: str) -> str:
        return f'{alias}."{name}"'

    sets = {name: (_chan_fold_sql(lambda n: q(target, n), lambda n: q(source, n), name) if rule == "chan"
                   else q(source, name) if rule == "hll"  # the source's sketch is the union already
                   else _FOLD_SQL[rule].format(t=q(target, name), s=q(source, name)))
            for name, rule in _combined(aggs)}
    def greater(name: str) -> str:
        s, t = q(source, name), q(target, name)
        return f"({s} IS NOT NULL AND ({t} IS NULL OR {s} > {t}))"

    def lesser(name: str) -> str:  # NULL lowest: a NULL source is less than a set target
        s, t = q(source, name), q(target, name)
        return f"(({s} IS NULL AND {t} IS NOT NULL) OR ({s} IS NOT NULL AND {t} IS NOT NULL AND {s} < {t}))"

    for fields, beats in ((_ordered_fields(aggs, keyed), greater), (_first_fields(aggs), lesser)):
        wins = " OR ".join("(" + " AND ".join([*(f"({q(target, n)} IS NOT DISTINCT FROM {q(source, n)})"
                                                 for n in fields[:i]), beats(name)]) + ")"
                           for i, name in enumerate(fields))
        sets.update({name: f"CASE WHEN {wins} THEN {q(source, name)} ELSE {q(target, name)} END" for name in fields})
    return sets


def flatten_last(aggs: tuple[Aggregation, ...], prefix: str = "", keyed: bool = False) -> list[Column]:
    """After an aggregation: the partial columns in their canonical order, `last` and `first` fields out of their
    structs."""
    in_last, in_first = set(_ordered_fields(aggs, keyed)), set(_first_fields(aggs))
    cols = []
    for name in partial_columns(aggs, keyed):
        struct = _LAST if name in in_last else _FIRST if name in in_first else None
        source = F.col(f"{prefix}{struct}.{name}") if struct else F.col(prefix + name)
        cols.append(source.alias(prefix + name))
    return cols


def final_columns(aggs: tuple[Aggregation, ...], prefix: str = "") -> list[Column]:
    """Partial columns to user-facing values: a mean becomes sum / count; the rest pass through."""
    cols = []
    for agg in aggs:
        if agg.kind == "mean":
            cols.append((F.col(f"{prefix}{agg.name}__sum") / F.col(f"{prefix}{agg.name}__count")).alias(agg.name))
        elif agg.kind == "approx_distinct":
            cols.append(F.hll_sketch_estimate(F.col(prefix + agg.name)).alias(agg.name))
        elif agg.kind in _SPREAD:
            n = F.col(f"{prefix}{agg.name}__count")
            sample = F.when(n > 1, F.col(f"{prefix}{agg.name}__m2") / (n - 1))
            cols.append((F.sqrt(sample) if agg.kind == "stddev" else sample).alias(agg.name))
        else:
            cols.append(F.col(prefix + agg.name).alias(agg.name))
    return cols


def event_as_partial(pipeline: Pipeline, aggs: tuple[Aggregation, ...], keyed: bool = False) -> list[Column]:
    """One event as a partial row, so events merge with seeded state through merge_aggregations(events=True); an
    approximate distinct count's value rides beside its empty sketch (a column of its own, absent from partial rows
    that are not events)."""
    cols: list[Column] = []
    for agg in aggs:
        value = F.col(agg.column).cast("double") if agg.column else None
        if agg.kind == "count":
            cols.append(F.lit(1).cast("long").alias(agg.name))
        elif agg.kind == "mean":
            cols += [value.alias(f"{agg.name}__sum"),
                     F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("long").alias(f"{agg.name}__count")]
        elif agg.kind in _SPREAD:
            cols += [F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("long").alias(f"{agg.name}__count"),
                     value.alias(f"{agg.name}__sum"),
                     F.when(value.isNotNull(), F.lit(0.0)).alias(f"{agg.name}__m2")]
        elif agg.kind == "approx_distinct":  # merged by merge_aggregations(events=True)
            cols += [F.lit(None).cast("binary").alias(agg.name),
                     F.col(agg.column).cast("string").alias(agg.name + _SKETCH_VALUE)]
        elif agg.kind not in _STRUCTS:
            cols.append(F.col(agg.column).alias(agg.name))
    if _ordered(aggs, keyed):
        cols += [F.col(pipeline.event_time).alias(LAST_BY_TIME), F.col(pipeline.event_id).alias(LAST_BY_ID)]
        cols += [F.col(a.column).alias(a.name) for a in aggs if a.kind == "last"]
    if _first_fields(aggs):
        cols += [F.col(pipeline.event_time).alias(FIRST_BY_TIME), F.col(pipeline.event_id).alias(FIRST_BY_ID)]
        cols += [F.col(a.column).alias(a.name) for a in aggs if a.kind == "first"]
    return cols


def sketch_columns(aggs: tuple[Aggregation, ...], prefix: str = "") -> list[str]:
    """The partial columns that are HLL sketches."""
    return [prefix + agg.name for agg in aggs if agg.kind == "approx_distinct"]


def union_sketches(source, target_rows: dict, keys: list[str], columns: list[str]):
    """`source` (a pyarrow table of partial rows) with each sketch in `columns` unioned with the one of the target
    row of its key (`target_rows`: key tuple -> row dict), through the `datasketches` package, which reads and
    writes Spark's sketches: what a delta-rs MERGE then sets (merge_into_sql). A union is idempotent, so a batch
    applied twice changes nothing."""
    import datasketches
    import pyarrow as pa

    if not columns or not target_rows:
        return source
    rows = source.select(keys).to_pylist()
    for name in columns:
        merged = []
        for row, mine in zip(rows, source.column(name).to_pylist()):
            theirs = target_rows.get(tuple(row[k] for k in keys), {}).get(name)
            if theirs is None or mine is None:
                merged.append(mine if theirs is None else theirs)
                continue
            union = datasketches.hll_union(HLL_LG_K)
            for sketch in (mine, theirs):
                union.update(datasketches.hll_sketch.deserialize(bytes(sketch)))
            merged.append(union.get_result(datasketches.tgt_hll_type.HLL_8).serialize_updatable())
        source = source.set_column(source.schema.get_field_index(name), name, pa.array(merged, pa.binary()))
    return source
