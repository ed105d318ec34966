"""switchyard as a team installs it: the wheel built from this checkout, installed with its dependencies at the
lower ends of their ranges (constraints-lowest.txt) into a fresh virtual environment (no checkout on its path, no
editable finder), used from an empty folder that holds top-level `jobs` and `deploy` packages of its own. Its first Spark session resolves the JVM jars into a fresh user
cache; the switch it runs through the installed `switchyard` command is checked against the oracle."""

from __future__ import annotations

import os
import re
import subprocess
import venv
from datetime import datetime
from pathlib import Path

import pytest

from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.tables import Tables
from tests.support.streams import QUIET, assert_matches_oracle, tail_events
from tests.support.wheel import build_wheel

ROOT = Path(__file__).resolve().parents[2]
LOWEST = ROOT / "constraints-lowest.txt"


def _lower_ends() -> dict[str, str]:
    """Each range pyproject.toml declares (the core's, the dagster and dev extras'), as its lower end."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dagster"],
                *project["optional-dependencies"]["dev"]]
    ends = {}
    for requirement in declared:
        found = re.match(r"([A-Za-z0-9_.-]+)(\[[^]]*])?\s*>=\s*([^,;\s]+)", requirement)
        if found:
            ends[found.group(1).lower().replace("_", "-")] = found.group(3)
    return ends


def test_the_lowest_constraints_are_the_ranges_lower_ends():
    pinned = dict(line.split("==") for line in LOWEST.read_text().splitlines() if line and not line.startswith("#"))
    ends = _lower_ends()
    assert "pyarrow" in ends and "dagster" in ends, ends
    from packaging.version import Version

    assert {name: Version(pinned.get(name, "0")) for name in ends} == {name: Version(v) for name, v in ends.items()}, \
        "constraints-lowest.txt pins each lower end"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The core wheel (no extras) in a fresh venv, its dependencies at their ranges' lower ends; the venv's bin/. (A
    later test adds the `dagster` extra.)"""
    where = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(where)
    venv.create(where / "venv", with_pip=True, symlinks=True)
    bin_dir = where / "venv" / "bin"
    done = subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
                           "--constraint", str(LOWEST), str(wheel)],
                          capture_output=True, text=True, cwd=where, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    return bin_dir


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """An empty folder with a team's own top-level `jobs` and `deploy` packages."""
    folder = tmp_path_factory.mktemp("team-project")
    for name in ("jobs", "deploy"):
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(f"OURS = {name!r}\n")
    return folder


def _env(tmp_path: Path, **more: str) -> dict:
    """The environment of a shell in the team's project: no PYTHONPATH, a user cache of its own."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("SWITCHYARD_", "PYTHON", "VIRTUAL_ENV"))}
    return {**keep, "XDG_CACHE_HOME": str(tmp_path / "cache"), "SWITCHYARD_SPARK_PROFILE": "test",
            "SWITCHYARD_STATE_PARTITIONS": "2", **more}


def test_one_import_name_beside_a_projects_own_jobs_and_deploy(installed, project, tmp_path):
    probe = ("import jobs, deploy, switchyard, switchyard.jobs.cli.parser, switchyard.deploy.jars\n"
             "print(jobs.OURS, deploy.OURS, switchyard.__file__, switchyard.jobs.__file__)\n"
             "try:\n    switchyard.switchyard_definitions\nexcept ImportError as err:\n    print(err)\n")
    shown = subprocess.run([str(installed / "python"), "-c", probe], cwd=project, env=_env(tmp_path),
                           capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-3000:]
    ours, also_ours, package, subpackage, refused = shown.stdout.split(maxsplit=4)
    assert (ours, also_ours) == ("jobs", "deploy")
    site = str(installed.parent / "lib")
    assert package.startswith(site) and subpackage.startswith(site), (package, subpackage)
    assert refused.strip() == "switchyard.switchyard_definitions needs the dagster extra: pip install " \
                              "'switchyard[dagster]'"

    listed = subprocess.run([str(installed / "switchyard"), "pipelines"], cwd=project, env=_env(tmp_path),
                            capture_output=True, text=True)
    assert listed.returncode == 0 and "demo" in listed.stdout and "kinds" in listed.stdout, listed.stderr
    config = subprocess.run([str(installed / "switchyard"), "config"], cwd=project, env=_env(tmp_path),
                            capture_output=True, text=True)
    home = [line.split() for line in config.stdout.splitlines() if line.startswith("SWITCHYARD_HOME ")]
    assert home and home[0][1] == str(tmp_path / "cache" / "switchyard"), config.stdout


TEAM_DEFINITIONS = """\
from pathlib import Path

import dagster as dg


class TeamSpark(dg.ConfigurableResource):
    app: str = "team"


@dg.asset
def team_table(spark: TeamSpark) -> None:
    pass


@dg.definitions
def defs() -> dg.Definitions:
    return dg.Definitions.merge(
        dg.Definitions(assets=[team_table], resources={"spark": TeamSpark()}, executor=dg.multiprocess_executor),
        dg.load_from_defs_folder(path_within_project=Path(__file__).parent))
"""


def _dg_project(folder: Path, warehouses: Path) -> Path:
    """A `dg` project, `team_project`: its own `spark` resource and asset, a multiprocess executor, and two
    switchyard Component folders (pipeline `demo` in one warehouse, `kinds` in another)."""
    folder.mkdir(parents=True)
    (folder / "pyproject.toml").write_text('[project]\nname = "team_project"\nversion = "0.1.0"\n\n'
                                           '[tool.dg]\ndirectory_type = "project"\n\n'
                                           '[tool.dg.project]\nroot_module = "team_project"\n')
    package = folder / "team_project"
    for name, pipeline in (("east", "demo"), ("west", "kinds")):
        (package / "defs" / name).mkdir(parents=True)
        (package / "defs" / name / "defs.yaml").write_text(
            f"type: switchyard.SwitchyardComponent\nattributes:\n  pipelines:\n    - pipeline: {pipeline}\n"
            f'      first_day: "2026-01-01"\n  warehouse: {warehouses / name}\n')
    (package / "__init__.py").write_text("")
    (package / "defs" / "__init__.py").write_text("")
    (package / "definitions.py").write_text(TEAM_DEFINITIONS)
    return folder


@pytest.mark.timeout(1800)
def test_a_teams_dg_project_loads_two_components_beside_its_own_spark_and_executor(installed, project, tmp_path):
    """The `dagster` extra and `dg` added to the installed copy; a team's `dg` project with its own `spark` resource,
    a multiprocess executor and two switchyard Component folders: `dg list components` lists the Component, and
    `dg list defs` loads both pipelines' assets beside the team's."""
    import json

    wheel = next((installed.parents[1] / "dist").glob("switchyard-*.whl"))
    done = subprocess.run([str(installed / "python"), "-m", "pip", "install", "--quiet", "--no-compile",
                           "--constraint", str(LOWEST), f"switchyard[dagster] @ {wheel.as_uri()}",
                           "dagster-dg-cli"], capture_output=True, text=True, cwd=project, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    team = _dg_project(tmp_path / "team", tmp_path / "warehouses")
    env = _env(tmp_path, PYTHONPATH=str(team))

    components = subprocess.run([str(installed / "dg"), "list", "components", "--json"], cwd=team, env=env,
                                capture_output=True, text=True, timeout=600)
    assert components.returncode == 0, components.stderr[-3000:]
    assert "switchyard.orchestration.component.SwitchyardComponent" in {
        c["key"] for c in json.loads(components.stdout)["items"]}

    listed = subprocess.run([str(installed / "dg"), "list", "defs", "--json"], cwd=team, env=env,
                            capture_output=True, text=True, timeout=600)
    assert listed.returncode == 0, listed.stderr[-3000:]
    assets = {a["asset_key"] for a in json.loads(listed.stdout)["assets"]}
    assert {"team_table", "demo/tiles", "demo/stream", "kinds/tiles", "kinds/stream"} <= assets, sorted(assets)


@pytest.mark.timeout(1800)
def test_the_switch_from_the_installed_command_matches_the_oracle(installed, project, tmp_path, spark, bootstrap,
                                                                  topic_name):
    warehouse = tmp_path / "warehouse"
    env = _env(tmp_path, SWITCHYARD_BOOTSTRAP=bootstrap, SWITCHYARD_WAREHOUSE=str(warehouse))
    run_generate(bootstrap, topic_name, events=1200, keys=20, partitions=2, days=2, seed=5, malformed_rate=0.03,
                 out=QUIET)

    def switchyard(*args: str) -> str:
        done = subprocess.run([str(installed / "switchyard"), *args, "--pipeline", "demo"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        return done.stdout + done.stderr

    first = switchyard("archive", "--topic", topic_name, "--fraction", "0.8")
    assert f"resolving Delta, the Kafka connector and S3A from Maven Central into {tmp_path / 'cache'}" in first
    switchyard("backfill")
    switchyard("handoff")
    produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 150, seed=7))
    later = switchyard("stream", "--until-caught-up")
    assert "resolving" not in later  # the jars were resolved once, into the user cache
    assert sorted(p.name for p in (tmp_path / "cache" / "switchyard").iterdir()) >= ["ivy", "jars"]
    assert_matches_oracle(spark, bootstrap, topic_name, Tables(str(warehouse), "demo"))
