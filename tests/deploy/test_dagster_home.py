"""`make ui` and `make demo` prepare the Dagster home alone before the webserver, the daemon and runs open it."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

from switchyard.deploy.dagster_home import prepare
from switchyard.deploy.paths import PROJECT_ROOT

OPEN_INSTANCE = "import dagster as dg\nwith dg.DagsterInstance.get() as instance: print(instance.get_runs_count())"


def _heads(db) -> list[str]:
    with sqlite3.connect(db) as connection:
        return [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]


def test_a_prepared_home_opens_in_several_processes_at_once(tmp_path):
    home = prepare(tmp_path / "dagster_home")
    assert (home / "dagster.yaml").read_text() == (PROJECT_ROOT / "deploy" / "dagster.yaml").read_text()
    stamped = {db: _heads(home / db) for db in ("history/runs.db", "schedules/schedules.db")}
    assert all(len(heads) == 1 for heads in stamped.values()), stamped

    # what dagster_ui.sh does next: several processes open the instance at the same moment
    openers = [subprocess.Popen([sys.executable, "-c", OPEN_INSTANCE], cwd=PROJECT_ROOT, env={"DAGSTER_HOME": str(home)},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outcomes = [(p.wait(timeout=120), *p.communicate()) for p in openers]
    assert [(code, out.strip()) for code, out, _ in outcomes] == [(0, "0")] * 3, [err[-2000:] for *_, err in outcomes]
    assert {db: _heads(home / db) for db in stamped} == stamped

    assert prepare(home) == home  # again: idempotent, the storage kept
    assert {db: _heads(home / db) for db in stamped} == stamped


def test_an_existing_dagster_yaml_is_left_alone(tmp_path):
    home = tmp_path / "team_home"
    home.mkdir()
    own = "telemetry:\n  enabled: false\n"  # a team's own instance settings
    (home / "dagster.yaml").write_text(own)
    prepare(home)
    assert (home / "dagster.yaml").read_text() == own
    assert (home / "history" / "runs.db").exists()  # the storage is still made ready
