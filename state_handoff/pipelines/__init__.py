"""The pipeline registry: built-in pipelines plus any registered under the `switchyard.pipelines` entry point."""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import entry_points

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.spec import Pipeline

_BUILT_IN = {"demo": "switchyard.state_handoff.pipelines.demo:PIPELINE",
             "kinds": "switchyard.state_handoff.pipelines.kinds:PIPELINE"}


def _load(target: str) -> Pipeline:
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def available() -> dict[str, str]:
    found = dict(_BUILT_IN)
    for ep in entry_points(group="switchyard.pipelines"):
        found[ep.name] = ep.value
    return found


def get_pipeline(name: str) -> Pipeline:
    targets = available()
    if name not in targets:
        raise UserError(f"unknown pipeline {name!r}: choose one of {', '.join(sorted(targets))}")
    return _load(targets[name])
