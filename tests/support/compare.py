"""Comparisons of switchyard's Delta tables with the oracle's expectations."""

from __future__ import annotations

import math
from datetime import timedelta
from types import SimpleNamespace

from tests.support import oracle


def rows(spark, path):
    return spark.read.format("delta").load(path).collect()


def close(a: float, b: float, scale: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-12, abs_tol=1e-9 * max(scale, 1.0))


def key_of_row(row, keys: tuple[str, ...] = ("key",)):
    """A row's key as the oracle keys its events: the `key` column, or the tuple of a composite key's columns."""
    return row[keys[0]] if len(keys) == 1 else tuple(row[k] for k in keys)


def assert_state_matches(spark, tables, expected: oracle.Expected, renamed: dict[str, str] | None = None,
                         keys: tuple[str, ...] = ("key",)):
    """`renamed`: a state column by the demo's name for it, where a changed definition renamed it; `keys`: the
    state's key columns (the oracle's `key_of` keys its events alike)."""
    by_key = {key_of_row(r, keys): r for r in rows(spark, tables.state)}
    assert set(by_key) == set(expected.state)
    for key, want in expected.state.items():
        row = by_key[key].asDict()
        got = SimpleNamespace(**{name: row[(renamed or {}).get(name, name)] for name in (
            "event_count", "amount_sum", "amount_min", "amount_max", "last_event_time", "last_amount")})
        assert got.event_count == want.event_count, key
        assert close(got.amount_sum, want.amount_sum, want.amount_abs), (key, got.amount_sum, want.amount_sum)
        assert (got.amount_min, got.amount_max) == (want.amount_min, want.amount_max), key
        assert (got.last_event_time, got.last_amount) == (want.last[2], want.last[3]), key


def assert_windows_match(spark, path, expected_windows: dict, size: timedelta = timedelta(hours=1),
                         keys: tuple[str, ...] = ("key",)):
    by_window = {(key_of_row(r, keys), r.window_start): r for r in rows(spark, path)}
    assert set(by_window) == set(expected_windows)
    for k, want in expected_windows.items():
        got = by_window[k]
        assert got.window_end == k[1] + size
        assert got.event_count == want.event_count, k
        assert close(got.amount_sum, want.amount_sum, want.amount_abs), k
        if "amount_max" in got.__fields__:  # a pipeline whose windows keep it too
            assert got.amount_max == want.amount_max, k
