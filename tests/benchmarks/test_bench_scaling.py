"""`python -m benchmarks scaling`: the chart and table of cost against size, from `bench --json` results."""

from __future__ import annotations

import json

from benchmarks.__main__ import main
from benchmarks.scaling import run_scaling


def _result(events: int, seconds: dict[str, float], jvm_mb: dict[str, int]) -> dict:
    return {"events": events, "runs": {mode: {"seconds": s, "peak_jvm_mb": jvm_mb[mode]} for mode, s in seconds.items()}}


def _scaled(tmp_path, results: list[dict]) -> tuple[dict, list[str]]:
    """`run_scaling` over the results, each written as a `bench --json` file: its table and the lines it printed."""
    files = []
    for i, result in enumerate(results):
        files.append(tmp_path / f"r{i}.json")
        files[-1].write_text(json.dumps(result))
    lines: list[str] = []
    return run_scaling([str(f) for f in files], str(tmp_path / "scaling.png"), out=lines.append), lines


def test_sizes_merge_by_events_and_every_arm_is_charted(tmp_path):
    small = _result(10**6, {"streaming_only": 80.0, "switchyard": 70.0, "batch_only": 27.0, "batch_full": 34.0},
                    {"streaming_only": 2200, "switchyard": 1600, "batch_only": 1100, "batch_full": 1300})
    large_bc = _result(3 * 10**7, {"switchyard": 600.0, "batch_only": 240.0}, {"switchyard": 2500, "batch_only": 2100})
    table, lines = _scaled(tmp_path, [large_bc, small])  # out of order on purpose

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


def test_results_of_two_spark_versions_keep_a_row_each_and_older_results_count_as_unknown(tmp_path):
    def on(version, result):
        return {**result, "spark_version": version} if version else result

    results = [on("4.2.0", _result(10**6, {"switchyard": 64.0}, {"switchyard": 1600})),
               on("4.0.0", _result(10**6, {"switchyard": 62.0, "batch_full": 48.0},
                                   {"switchyard": 1500, "batch_full": 1200})),
               on("4.10.0", _result(10**5, {"switchyard": 30.0}, {"switchyard": 1100})),
               on(None, _result(10**6, {"switchyard": 70.0}, {"switchyard": 1700}))]  # written before the bench said
    table, lines = _scaled(tmp_path, results)

    assert [(r["events"], r["spark_version"]) for r in table["sizes"]] == [
        (10**5, "4.10.0"), (10**6, None), (10**6, "4.0.0"), (10**6, "4.2.0")]  # by size, then oldest version first
    assert table["sizes"][2]["batch_full_s"] == 48.0 and "batch_full_s" not in table["sizes"][3]
    assert [line.split()[:3] for line in lines[1:]] == [["100,000", "4.10.0", "-"], ["1,000,000", "unknown", "-"],
                                                        ["1,000,000", "4.0.0", "-"], ["1,000,000", "4.2.0", "-"]]
    assert (tmp_path / "scaling.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "scaling.json").read_text()) == table


def test_each_spark_version_is_a_line_of_its_own_the_newest_solid(tmp_path, monkeypatch):
    from benchmarks import scaling

    drawn = {}
    monkeypatch.setattr(scaling, "save_figure", lambda fig, path: drawn.update(
        {line.get_label(): line.get_linestyle() for line in fig.axes[0].get_lines()}))
    rows = scaling.scaling([{**_result(n, {"switchyard": 1.0}, {"switchyard": 1}), "spark_version": v}
                            for n in (10**5, 10**6) for v in ("4.0.0", "4.2.0")])["sizes"]
    scaling._chart(rows, str(tmp_path / "c.png"))
    assert drawn == {"B switchyard, Spark 4.2.0": "-", "B switchyard, Spark 4.0.0": "--"}


def test_b_over_c_every_table_is_kept_and_charted_where_a_result_has_both(tmp_path, monkeypatch):
    from benchmarks import scaling

    drawn = {}
    monkeypatch.setattr(scaling, "save_figure", lambda fig, path: drawn.update(
        {ax.get_ylabel(): [tuple(map(tuple, line.get_xydata())) for line in ax.get_lines()] for ax in fig.axes}))
    results = [{**_result(10**6, {"switchyard": 30.0, "batch_full": 20.0}, {"switchyard": 1, "batch_full": 1}),
                "spark_version": "4.2.0"},
               {**_result(10**8, {"switchyard": 1160.0, "batch_full": 1000.0}, {"switchyard": 1, "batch_full": 1}),
                "spark_version": "4.2.0"},
               {**_result(10**7, {"switchyard": 60.0}, {"switchyard": 1}), "spark_version": "4.2.0"}]  # B alone
    table, lines = _scaled(tmp_path, results)

    assert [r.get("switchyard_over_batch_full") for r in table["sizes"]] == [1.5, None, 1.16]
    assert drawn["B / C, every table"][0] == ((10**6, 1.5), (10**8, 1.16))  # then the line at 1
    assert lines[0].split()[-1] == "B/C-full" and [line.split()[-1] for line in lines[1:]] == ["1.50", "-", "1.16"]
