"""The project's Python code as one zip that a session on a cluster ships to its executors (`addPyFile`), so an
executor needs neither this checkout nor the editable install that points at it."""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import time
import zipfile
from pathlib import Path

from switchyard.deploy.paths import shipped_code_dir

# What executor-side code may import: the transforms and the aggregate algebra (jobs -> state_handoff), deploy,
# which jobs import, and the `switchyard` package they live in. orchestration/ (Dagster definitions) only ever runs
# on the driver.
PACKAGES = ("switchyard", "switchyard.state_handoff", "switchyard.jobs", "switchyard.deploy")
KEEP_OLD_ZIPS_S = 24 * 3600


def _sources() -> list[tuple[Path, str]]:
    """Each source file, with its name in the zip as in the installed layout (jobs/cli/parser.py of a checkout is
    switchyard/jobs/cli/parser.py), found where the package is: a checkout or an installed copy."""
    found = []
    for package in PACKAGES:
        folder = Path(importlib.import_module(package).__file__).parent
        inside = Path(*package.split("."))
        for path in folder.rglob("*.py") if package != "switchyard" else folder.glob("*.py"):
            if "__pycache__" not in path.parts:
                found.append((path, str(inside / path.relative_to(folder))))
    return sorted(found, key=lambda source: source[1])


def project_zip() -> Path:
    """The zip of the current sources, named by their content hash: built once, rebuilt when a source changes."""
    sources = _sources()
    digest = hashlib.sha256()
    for path, name in sources:
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    folder = shipped_code_dir()
    target = folder / f"switchyard-{digest.hexdigest()[:16]}.zip"
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(f".{os.getpid()}.partial")
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, name in sources:
            archive.write(path, name)
    os.replace(partial, target)
    # A running driver may still serve an older zip to executors it adds later: remove only old ones.
    for old in folder.glob("switchyard-*.zip"):
        if old != target and time.time() - old.stat().st_mtime > KEEP_OLD_ZIPS_S:
            old.unlink(missing_ok=True)
    return target


def ship_project_code(spark_context) -> str:
    """Add the project's zip to the executors' Python path (once per context); return its name."""
    from pyspark import SparkFiles

    path = project_zip()
    if not any(f.endswith("/" + path.name) for f in spark_context.listFiles):
        spark_context.addPyFile(str(path))
    # addPyFile also puts the copy on the driver's own path (for local mode); the driver keeps importing from
    # its checkout, so that tracebacks and files found beside a module (deploy/log4j2.properties) stay where they are.
    copy = os.path.join(SparkFiles.getRootDirectory(), path.name)
    sys.path[:] = [p for p in sys.path if p != copy]
    return path.name
