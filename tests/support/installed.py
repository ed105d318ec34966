"""A team's pipeline package as a test makes it: a module and the files beside it in a folder a process puts on
PYTHONPATH, registered under switchyard's entry point as an installed package is."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def install_pipeline(site: Path, module: str, pipeline: str, source: str, beside: dict[str, str]):
    """Write module `module` (its `source` declares `PIPELINE`) and the files `beside` (name -> text) into `site`,
    with the dist-info registering `pipeline`; the declaration as this process reads it."""
    site.mkdir()
    for name, text in beside.items():
        (site / name).write_text(text)
    (site / f"{module}.py").write_text(source)
    info = site / f"{module}-0.1.dist-info"
    info.mkdir()
    dist = module.replace("_", "-")
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[switchyard.pipelines]\n{pipeline} = {module}:PIPELINE\n")
    spec = importlib.util.spec_from_file_location(module, site / f"{module}.py")
    loaded = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(loaded)
    return loaded.PIPELINE
