"""Every SWITCHYARD_* setting the code reads is in one table (state_handoff/settings.py), shown by docs/cli.md and by
`switchyard config` with its value in effect and where it came from."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from state_handoff.settings import BY_NAME, markdown_table

ROOT = Path(__file__).resolve().parents[2]
READ = re.compile(r"SWITCHYARD_[A-Z0-9_]*[A-Z0-9]")


def test_every_setting_the_code_reads_is_in_the_table():
    sources = [p for folder in ("jobs", "state_handoff", "orchestration", "deploy", "benchmarks")
               for p in (ROOT / folder).rglob("*") if p.suffix in (".py", ".sh")] + [ROOT / "Makefile"]
    named = {name for path in sources for name in READ.findall(path.read_text())}
    named -= {"SWITCHYARD_KAFKA"}  # the prefix kafka_security.py reads them by
    assert named - set(BY_NAME) == set(), "settings read but not in state_handoff/settings.py"


def test_the_docs_show_the_table():
    assert markdown_table() in (ROOT / "docs" / "cli.md").read_text()


def test_config_shows_each_value_in_effect_and_where_it_came_from():
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")},
           "SWITCHYARD_WAREHOUSE": "/data/wh", "SWITCHYARD_KAFKA_SASL_PASSWORD": "hunter2"}
    shown = subprocess.run([sys.executable, "-m", "jobs.cli", "config"], capture_output=True, text=True, cwd=ROOT,
                           env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    lines = {line.split()[0]: line for line in shown.stdout.splitlines()}
    assert set(lines) == set(BY_NAME)
    assert lines["SWITCHYARD_WAREHOUSE"].split()[1:] == ["/data/wh", "(environment)"]
    assert lines["SWITCHYARD_BOOTSTRAP"].split()[1:] == ["127.0.0.1:9092", "(default)"]
    assert lines["SWITCHYARD_KAFKA_SASL_PASSWORD"].split()[1:] == ["********", "(environment)"]
    assert "hunter2" not in shown.stdout
    assert lines["SWITCHYARD_PIPELINE"].split()[1:] == ["(unset)"]
