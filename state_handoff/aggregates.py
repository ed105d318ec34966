"""The aggregate algebra: per-record partials, their merge, and finalization, as Spark columns.

Every aggregation is a mergeable partial, so day tiles merge into state and state merges with a
micro-batch through the same expressions. All `last` aggregations share one ordering,
(event_time, event_id), carried as `last_by_time` / `last_by_event_id`.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from state_handoff.spec import Aggregation, Pipeline

LAST_BY_TIME = "last_by_time"
LAST_BY_ID = "last_by_event_id"
_LAST = "__last"
WINDOW_PREFIX = "window_"


def _partial_names(agg: Aggregation) -> list[str]:
    return [f"{agg.name}__sum", f"{agg.name}__count"] if agg.kind == "mean" else [agg.name]


def _ordered(aggs: tuple[Aggregation, ...], keyed: bool) -> bool:
    """Keyed partials always carry the newest (event_time, event_id): it gives the watermark too."""
    return keyed or any(agg.kind == "last" for agg in aggs)


def partial_columns(aggs: tuple[Aggregation, ...], keyed: bool = False) -> list[str]:
    names = [n for agg in aggs if agg.kind != "last" for n in _partial_names(agg)]
    lasts = [agg.name for agg in aggs if agg.kind == "last"]
    return names + ([LAST_BY_TIME, LAST_BY_ID, *lasts] if _ordered(aggs, keyed) else [])


def _from_events(agg: Aggregation, prefix: str) -> list[Column]:
    col = F.col(agg.column) if agg.column else None
    name = prefix + agg.name
    return {
        "count": lambda: [F.count(F.lit(1)).alias(name)],
        "sum": lambda: [F.sum(col).alias(name)],
        "min": lambda: [F.min(col).alias(name)],
        "max": lambda: [F.max(col).alias(name)],
        "mean": lambda: [F.sum(col).alias(f"{name}__sum"), F.count(col).alias(f"{name}__count")],
    }[agg.kind]()


def _merge(agg: Aggregation, prefix: str) -> list[Column]:
    def merged(name, fn):
        return fn(F.col(prefix + name)).alias(prefix + name)

    if agg.kind in ("count", "sum"):
        return [merged(agg.name, F.sum)]
    if agg.kind == "mean":
        return [merged(f"{agg.name}__sum", F.sum), merged(f"{agg.name}__count", F.sum)]
    return [merged(agg.name, {"min": F.min, "max": F.max}[agg.kind])]


def event_aggregations(pipeline: Pipeline, aggs: tuple[Aggregation, ...], prefix: str = "",
                       keyed: bool = False) -> list[Column]:
    """Aggregate expressions over parsed events, producing partial columns (named with `prefix`)."""
    exprs = [e for agg in aggs if agg.kind != "last" for e in _from_events(agg, prefix)]
    lasts = [agg for agg in aggs if agg.kind == "last"]
    if _ordered(aggs, keyed):
        order = F.struct(F.col(pipeline.event_time).alias(LAST_BY_TIME), F.col(pipeline.event_id).alias(LAST_BY_ID),
                         *[F.col(a.column).alias(a.name) for a in lasts])
        exprs.append(F.max(order).alias(prefix + _LAST))
    return exprs


def merge_aggregations(aggs: tuple[Aggregation, ...], prefix: str = "", keyed: bool = False) -> list[Column]:
    """Aggregate expressions over partial rows, producing the same partial columns."""
    exprs = [e for agg in aggs if agg.kind != "last" for e in _merge(agg, prefix)]
    lasts = [agg for agg in aggs if agg.kind == "last"]
    if _ordered(aggs, keyed):
        order = F.struct(*[F.col(prefix + n) for n in (LAST_BY_TIME, LAST_BY_ID, *[a.name for a in lasts])])
        exprs.append(F.max(order).alias(prefix + _LAST))
    return exprs


def flatten_last(aggs: tuple[Aggregation, ...], prefix: str = "", keyed: bool = False) -> list[Column]:
    """After an aggregation: the partial columns in their canonical order, `last` fields out of their struct."""
    cols = []
    for name in partial_columns(aggs, keyed):
        is_last = name in (LAST_BY_TIME, LAST_BY_ID) or any(a.kind == "last" and a.name == name for a in aggs)
        source = F.col(f"{prefix}{_LAST}.{name}") if is_last else F.col(prefix + name)
        cols.append(source.alias(prefix + name))
    return cols


def final_columns(aggs: tuple[Aggregation, ...], prefix: str = "") -> list[Column]:
    """Partial columns to user-facing values: a mean becomes sum / count; the rest pass through."""
    cols = []
    for agg in aggs:
        if agg.kind == "mean":
            cols.append((F.col(f"{prefix}{agg.name}__sum") / F.col(f"{prefix}{agg.name}__count")).alias(agg.name))
        else:
            cols.append(F.col(prefix + agg.name).alias(agg.name))
    return cols


def event_as_partial(pipeline: Pipeline, aggs: tuple[Aggregation, ...], keyed: bool = False) -> list[Column]:
    """One event as a partial row, so events merge with seeded state through merge_aggregations."""
    cols: list[Column] = []
    for agg in aggs:
        value = F.col(agg.column).cast("double") if agg.column else None
        if agg.kind == "count":
            cols.append(F.lit(1).cast("long").alias(agg.name))
        elif agg.kind == "mean":
            cols += [value.alias(f"{agg.name}__sum"),
                     F.when(value.isNotNull(), F.lit(1)).otherwise(F.lit(0)).cast("long").alias(f"{agg.name}__count")]
        elif agg.kind != "last":
            cols.append(F.col(agg.column).alias(agg.name))
    if _ordered(aggs, keyed):
        cols += [F.col(pipeline.event_time).alias(LAST_BY_TIME), F.col(pipeline.event_id).alias(LAST_BY_ID)]
        cols += [F.col(a.column).alias(a.name) for a in aggs if a.kind == "last"]
    return cols
