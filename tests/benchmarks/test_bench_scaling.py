"""`python -m benchmarks scaling`: the chart and table of cost against size, from `bench --json` results."""

from __future__ import annotations

import json

from benchmarks.__main__ import main
from benchmarks.scaling import run_scaling


def _result(events: int, seconds: dict[str, float], jvm_mb: dict[str, int]) -> dict:
    return {"events": events, "runs": {mode: {"seconds": s, "peak_jvm_mb": jvm_mb[mode]} for mode, s in seconds.items()}}


def test_sizes_merge_by_events_and_every_arm_is_charted(tmp_path):
    small = _result(10**6, {"streaming_only": 80.0, "switchyard": 70.0, "batch_only": 27.0, "batch_full": 34.0},
                    {"streaming_only": 2200, "switchyard": 1600, "batch_only": 1100, "batch_full": 1300})
    large_bc = _result(3 * 10**7, {"switchyard": 600.0, "batch_only": 240.0}, {"switchyard": 2500, "batch_only": 2100})
    files = []
    for i, result in enumerate((large_bc, small)):  # out of order on purpose
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(result))
    lines: list[str] = []
    table = run_scaling([str(f) for f in files], str(tmp_path / "scaling.png"), out=lines.append)

    assert [r["events"] for r in table["sizes"]] == [10**6, 3 * 10**7]
    assert table["sizes"][0]["streaming_only_s"] == 80.0 and "streaming_only_s" not in table["sizes"][1]
    assert [r["switchyard_jvm_mb"] for r in table["sizes"]] == [1600, 2500]
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "scaling.json").read_text()) == table
    assert lines[1].split()[0] == "1,000,000" and "600.0s" in lines[2]


def test_a_file_that_is_not_a_result_is_a_one_line_error(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert main(["scaling", str(bad), "--chart", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err and "bench --json" in err
