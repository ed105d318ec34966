"""The layering the code follows, as pyproject.toml's import-linter contracts state it: orchestration -> jobs ->
deploy -> state_handoff, each importing only the layers below it; no Dagster or Spark job in state_handoff; no
benchmark in the product; no two packages or modules that import each other.

`lint-imports` finds a package's modules in the package's own folder, and switchyard's folders stand beside it in
the checkout (pyproject.toml's package-dir). So it reads the package laid out as it is installed: a folder where
switchyard/<folder> links to each <folder> of the checkout, the code itself unchanged."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _installed_layout(at: Path) -> Path:
    """switchyard/ as the wheel lays it out, every file a link into the checkout; benchmarks/ beside it (the
    contracts name it: the product may not import it)."""
    package_dir = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = at / "switchyard"
    top.mkdir()
    for item in (ROOT / package_dir["switchyard"]).iterdir():
        if item.name != "__pycache__":
            (top / item.name).symlink_to(item)
    for name, folder in package_dir.items():
        if name != "switchyard":
            (at / Path(*name.split("."))).symlink_to(ROOT / folder, target_is_directory=True)
    (at / "benchmarks").symlink_to(ROOT / "benchmarks", target_is_directory=True)
    return at


def test_the_code_keeps_its_layers(tmp_path):
    # lint-imports puts its working folder first on sys.path: there `switchyard` is the installed layout
    checked = subprocess.run([str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache", "--no-logo"],
                             cwd=_installed_layout(tmp_path), capture_output=True, text=True)
    shown = checked.stdout + checked.stderr
    assert checked.returncode == 0, shown
    # the graph holds the code, not only switchyard/__init__.py: at least every module of the package's folders
    analysed = int(re.search(r"Analyzed (\d+) files", shown).group(1))
    modules = sum(1 for folder in ("switchyard", "jobs", "state_handoff", "orchestration", "deploy", "benchmarks")
                  for _ in (ROOT / folder).rglob("*.py"))
    assert analysed >= modules, shown
