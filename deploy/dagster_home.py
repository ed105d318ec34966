"""The Dagster instance home behind `make ui` and `make demo`, made ready before the processes that share it start.

The webserver, the daemon and a run's process each open the instance, and the first to open a fresh home creates
its SQLite storage and stamps the schema's version. Two doing it at once stamp it twice, and every later opening
fails with alembic's "Version table 'alembic_version' has more than one head present" (the webserver and the
daemon started together on a fresh home do just that). So one process opens the home first, alone: this one.

    python -m switchyard.deploy.dagster_home [DAGSTER_HOME]
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from switchyard.deploy.paths import PROJECT_ROOT

INSTANCE_YAML = PROJECT_ROOT / "deploy" / "dagster.yaml"


def default_home() -> Path:
    return Path(os.environ.get("DAGSTER_HOME", PROJECT_ROOT / ".dagster_home")).resolve()


def prepare(home: Path) -> Path:
    """The project's instance configuration in `home` unless the home has a `dagster.yaml` of its own (a team's
    instance settings are theirs), and its storage created by this process alone (an existing one is only opened);
    idempotent."""
    import dagster as dg

    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists():
        shutil.copy(INSTANCE_YAML, home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)  # the configuration's storage lives there
    with dg.DagsterInstance.from_config(str(home)):
        pass
    return home


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    prepare(Path(args[0]).resolve() if args else default_home())
    return 0


if __name__ == "__main__":
    sys.exit(main())
