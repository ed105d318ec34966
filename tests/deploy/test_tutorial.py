"""docs/your-own-pipeline.md followed literally in a scratch folder outside the checkout: every file block written
where its first line says, every shell block run in order, starting from `python3 -m venv` and `pip install` of the
wheel built from this checkout (its dependencies held to constraints.txt, its jars resolved into a user cache of its
own); then the pipeline's state, windows and dead letters are checked against the oracle, and its Dagster
definitions as `dg` listed them."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from deltalake import DeltaTable

from switchyard.deploy.paths import PROJECT_ROOT
from tests.support import oracle
from tests.support.wheel import build_wheel

DOC = PROJECT_ROOT / "docs" / "your-own-pipeline.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
FILE = re.compile(r"^# (my-pipelines/\S+)$")
CWD = "tutorial-block-ended-in:"


def tutorial_blocks() -> list[tuple[str, str]]:
    """The tutorial's code blocks (language, text) in order, up to its reference section."""
    text = DOC.read_text().split("\n## Reference", 1)[0]
    return BLOCK.findall(text)


@pytest.fixture
def scratch(tmp_path):
    """An empty folder outside the checkout."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    return folder


def _pip_cache(scratch: Path) -> str:
    """The pip cache this machine's installs fill (the checkout's `make setup` among them); one of the scratch
    folder's own when pip keeps none."""
    found = subprocess.run([sys.executable, "-m", "pip", "cache", "dir"], capture_output=True, text=True)
    return found.stdout.strip() if found.returncode == 0 and found.stdout.strip() else str(scratch / "cache" / "pip")


def _shell_env(scratch: Path, wheel: Path, bootstrap: str) -> dict[str, str]:
    """A user's shell: the project's venv (once made) first on PATH, then a `python3` that is a plain interpreter;
    nothing of switchyard's checkout or settings, a user cache of its own (the jars resolved into it), and the
    machine's pip cache, as a user who has installed Python packages before has one."""
    shim = scratch / "shim"
    shim.mkdir()
    (shim / "python3").symlink_to(Path(sys._base_executable).resolve())
    venv_bin = scratch / "my-pipelines" / ".venv" / "bin"
    checkout_bin = str(Path(sys.executable).parent)
    path = [p for p in os.environ["PATH"].split(os.pathsep) if p != checkout_bin]
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHYARD_", "PYTHON", "VIRTUAL_ENV", "PIP_"))}
    return {**keep, "PATH": os.pathsep.join([str(venv_bin), str(shim), *path]), "VIRTUAL_ENV": str(venv_bin.parent),
            "SWITCHYARD_SOURCE": str(wheel), "PIP_CONSTRAINT": str(PROJECT_ROOT / "constraints.txt"),
            "XDG_CACHE_HOME": str(scratch / "cache"), "PIP_CACHE_DIR": _pip_cache(scratch),
            "SWITCHYARD_WAREHOUSE": str(scratch / "warehouse"),
            "SWITCHYARD_BOOTSTRAP": bootstrap, "SWITCHYARD_SPARK_PROFILE": "test",
            "DAGSTER_HOME": str(scratch / "dagster_home")}


def _state(path: str) -> dict[str, dict]:
    return {row["customer_id"]: row for row in DeltaTable(path).to_pyarrow_table().to_pylist()}


@pytest.mark.timeout(1800)  # a venv and its install, archive, backfill, handoff and stream: a JVM each
def test_the_tutorial_runs_from_a_scratch_project(scratch, bootstrap):
    blocks = tutorial_blocks()
    assert sum(lang == "bash" for lang, _ in blocks) >= 5 and sum(bool(FILE.match(b.splitlines()[0])) for _, b in blocks) >= 6
    assert "pip install" in blocks[0][1] and "venv" in blocks[0][1], "the tutorial starts from an install"
    warehouse = scratch / "warehouse"
    env = _shell_env(scratch, build_wheel(scratch.parent / "wheel"), bootstrap)
    (scratch / "dagster_home").mkdir()
    cwd, transcript = scratch, []
    for lang, body in blocks:
        path = FILE.match(body.splitlines()[0]) if body.strip() else None
        if path:
            target = scratch / path.group(1)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body)
        elif lang == "bash":
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", f"{body}\necho {CWD}$(pwd)"], cwd=cwd,
                                  env=env, capture_output=True, text=True, timeout=1200)
            transcript.append(f"$ {body}{done.stdout}{done.stderr[-3000:]}")
            assert done.returncode == 0, "\n".join(transcript)
            cwd = Path(done.stdout.rsplit(CWD, 1)[1].strip())  # where the block's `cd` left the shell
        else:
            pytest.fail(f"a {lang} block that names no file under my-pipelines/:\n{body}")
    project = scratch / "my-pipelines"
    out = "\n".join(transcript)
    assert "orders  (key customer_id, windows of 1 day" in out, out
    assert "resolving Delta, the Kafka connector and S3A from Maven Central into" in out, "the jars came by themselves"

    # its Dagster definitions, as `dg list defs --json` read them from the project
    listed = json.loads((project / "definitions.json").read_text())
    keys = {a["asset_key"] for a in listed["assets"]}
    assert {a["group_name"] for a in listed["assets"]} == {"orders"}
    assert {f"orders/{a}" for a in ("archive", "tiles", "state", "windows", "window_state", "handoff",
                                    "stream")} == keys
    assert {j["name"] for j in listed["jobs"]} >= {"orders__backfill_then_stream", "orders__rebase_stream",
                                                   "orders__stop_stream"}
    python = str(project / ".venv" / "bin" / "python")
    in_python = subprocess.run([python, "-c", "import dagster as dg, switchyard; from my_pipelines.in_python import defs; "
                                "dg.Definitions.validate_loadable(defs); print(switchyard.__file__); "
                                "print(sorted(k.to_user_string() for k in defs.resolve_all_asset_keys()))"],
                               cwd=project, env=env, capture_output=True, text=True, timeout=300)
    assert in_python.returncode == 0 and "'orders/state'" in in_python.stdout, in_python.stderr[-3000:]
    assert in_python.stdout.startswith(str(project / ".venv" / "lib")), "switchyard from the project's venv"

    # the state, windows and dead letters against plain Python over the topic
    records = oracle.read_topic(bootstrap, "orders")
    assert len(records) == 1000
    expected: dict[str, list[float]] = defaultdict(list)
    firsts: dict[str, tuple] = {}
    for r in records:
        order = json.loads(r.value)
        customer = order["customer"]["id"]
        expected[customer].append(order["total"])
        firsts[customer] = min(firsts.get(customer, (order["placed_at"], order["order_id"])),
                               (order["placed_at"], order["order_id"]))
    state = _state(str(warehouse / "orders" / "state"))
    assert set(state) == set(expected)
    for customer, values in expected.items():
        row = state[customer]
        assert row["orders"] == len(values) and math.isclose(row["revenue"], sum(values), rel_tol=1e-9)
        assert row["first_order"] == firsts[customer][1], customer
        assert row["mean_order__count"] == len(values), "a mean is kept as its mergeable parts, sum and count"
        assert math.isclose(row["mean_order__sum"] / row["mean_order__count"], sum(values) / len(values),
                            rel_tol=1e-9)
    windowed = sum(row["orders"] for name in ("windows", "window_state")
                   for row in DeltaTable(str(warehouse / "orders" / name)).to_pyarrow_table().to_pylist())
    late = DeltaTable(str(warehouse / "orders" / "late")).to_pyarrow_table().num_rows
    dead = DeltaTable(str(warehouse / "orders" / "dead_letter")).to_pyarrow_table().num_rows
    assert (windowed + late, dead) == (1000, 0), "every order in a window or late, none dead-lettered"
