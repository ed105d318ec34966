"""`switchyard status` as people read it: figures rounded, per-partition figures summed."""

from __future__ import annotations

from switchyard.state_handoff.control.status import format_status


def test_status_shows_rates_and_durations_to_one_decimal():
    shown = format_status({"pipeline": "demo", "phase": "caught up", "latest_status": "CAUGHT_UP",
                           "latest_at": "2026-11-25T00:00:00+00:00", "input_rows_per_s": 34.136546184738954,
                           "last_batch_ms": 1204, "offsets_behind": {"0": 3, "1": 0},
                           "stream_accounting": None, "processed_rows_per_s": 12345.678})
    assert "  input rate (rows/s): 34.1\n" in shown + "\n"
    assert "  processed rate (rows/s): 12,345.7" in shown
    assert "  last batch (ms): 1204" in shown and "  offsets behind latest: p0:3, p1:0 (total 3)" in shown
    assert "34.13" not in shown
