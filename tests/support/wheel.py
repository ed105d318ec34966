"""The wheel a team would install, built from a copy of this checkout's sources: a build in the checkout itself
writes its `build/` folder there, which two tests building at once would share."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_LEFT_OUT = shutil.ignore_patterns(".git", ".venv", ".switchyard", "build", "dist", "*.egg-info", "__pycache__",
                                   ".pytest_cache", "tests", "benchmarks", "warehouse", "bench-out")


def build_wheel(where: Path) -> Path:
    """The switchyard wheel, built (no dependencies, no download) under `where`; its path."""
    source = where / "source"
    shutil.copytree(ROOT, source, ignore=_LEFT_OUT)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                            "--wheel-dir", str(where / "dist"), str(source)], capture_output=True, text=True,
                           cwd=where)
    assert built.returncode == 0, built.stderr[-3000:]
    return next((where / "dist").glob("switchyard-*.whl"))
