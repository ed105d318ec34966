"""The command line as an operator meets it, before any JVM or broker: options from the environment, and a
warehouse or pipeline that holds nothing is a one-line error, not an empty status."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _switchyard(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_PIPELINE"}
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**environment, **(env or {})}, timeout=120)


def test_status_of_a_pipeline_with_nothing_in_the_warehouse_is_a_one_line_error(tmp_path):
    typo = tmp_path / "warehuose"
    result = _switchyard("status", "--pipeline", "demo", "--warehouse", str(typo))
    assert result.returncode == 2 and result.stdout == "", result
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"switchyard status: error: pipeline demo has nothing in warehouse {typo} ")
    assert "check --warehouse and --pipeline" in result.stderr


def test_the_pipeline_comes_from_the_environment_when_not_given(tmp_path):
    missing = _switchyard("status", "--warehouse", str(tmp_path))
    assert missing.returncode == 2 and "the following arguments are required: --pipeline" in missing.stderr
    from_env = _switchyard("status", "--warehouse", str(tmp_path), env={"SWITCHYARD_PIPELINE": "demo"})
    assert from_env.returncode == 2 and "pipeline demo has nothing in warehouse" in from_env.stderr, from_env
    shown = _switchyard("stop", "--help", env={"SWITCHYARD_PIPELINE": "demo"}).stdout
    assert "SWITCHYARD_PIPELINE, now demo" in " ".join(shown.split())


def test_a_warehouse_that_is_a_file_is_a_one_line_error_before_any_work(tmp_path):
    """Found by the fault campaign's checker test: `--warehouse` naming a file was a traceback from delta-rs."""
    a_file = tmp_path / "warehouse.txt"
    a_file.write_text("not a folder")
    for command in (["handoff"], ["stream", "--until-caught-up"], ["backfill"], ["stop"],
                    ["archive", "--topic", "t", "--fraction", "0.5"]):
        result = _switchyard(*command, "--pipeline", "demo", "--warehouse", str(a_file))
        assert result.returncode == 2 and "Traceback" not in result.stderr, (command, result.stderr[-800:])
        assert result.stderr == (f"switchyard {command[0]}: error: --warehouse {a_file} is a file, not a folder: "
                                 "name a folder (it is created when missing) or an s3a:// URI\n"), result.stderr
    assert a_file.read_text() == "not a folder"
