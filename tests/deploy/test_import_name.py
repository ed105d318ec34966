"""switchyard installs one import name: the repository's folders map into `switchyard` (pyproject.toml), and no
module imports them by their folder name, which would load a second copy of the module beside the first."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("jobs", "state_handoff", "orchestration", "deploy")


def _python_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split()]


def test_no_module_imports_a_folder_by_its_own_name():
    found = []
    for path in _python_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            found += [f"{path.relative_to(ROOT)}:{node.lineno}: {name}" for name in names
                      if name.split(".")[0] in FOLDERS]
    assert not found, "import these through switchyard.<folder>:\n" + "\n".join(found)


def test_every_package_folder_is_in_the_installed_package_list():
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert tool["package-dir"] == {"switchyard": "switchyard", **{f"switchyard.{top}": top for top in FOLDERS}}
    on_disk = {"switchyard"} | {"switchyard." + ".".join(init.parent.relative_to(ROOT).parts)
                                for top in FOLDERS for init in (ROOT / top).rglob("__init__.py")}
    assert on_disk == set(tool["packages"]), sorted(on_disk ^ set(tool["packages"]))


def test_importing_switchyard_loads_neither_spark_nor_dagster():
    code = ("import sys, switchyard\nassert switchyard.Pipeline and switchyard.count\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'dagster', 'great_expectations')))")
    shown = subprocess.run([sys.executable, "-c", code], cwd="/", capture_output=True, text=True, check=True)
    assert shown.stdout.strip() == "[]", shown.stdout
