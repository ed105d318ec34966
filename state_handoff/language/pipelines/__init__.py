"""The pipeline registry: built-in pipelines plus any registered under the `switchyard.pipelines` entry point; and
any other pipeline by reference, `module:NAME` (a `Pipeline` at a module's top level), which is how a `Pipeline`
object a Dagster project passes in reaches the stream process Dagster starts."""

from __future__ import annotations

import sys
from importlib import import_module
from importlib.metadata import entry_points

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.spec import Pipeline

_BUILT_IN = {"demo": "switchyard.state_handoff.language.pipelines.demo:PIPELINE",
             "kinds": "switchyard.state_handoff.language.pipelines.kinds:PIPELINE"}


def _load(target: str) -> Pipeline:
    module, attr = target.split(":")
    return getattr(import_module(module), attr)


def available() -> dict[str, str]:
    found = dict(_BUILT_IN)
    for ep in entry_points(group="switchyard.pipelines"):
        found[ep.name] = ep.value
    return found


def get_pipeline(name: str) -> Pipeline:
    """A registered pipeline by its name, or any pipeline by reference (`module:NAME`)."""
    if ":" in name:
        return _by_reference(name)
    targets = available()
    if name not in targets:
        raise UserError(f"unknown pipeline {name!r}: choose one of {', '.join(sorted(targets))}")
    return _load(targets[name])


def _by_reference(target: str) -> Pipeline:
    module, _, attr = target.partition(":")
    try:
        found = getattr(import_module(module), attr)
    except ImportError as err:
        raise UserError(f"pipeline {target}: module {module} cannot be imported ({err})") from None
    except AttributeError:
        raise UserError(f"pipeline {target}: module {module} has no {attr}") from None
    if not isinstance(found, Pipeline):
        raise UserError(f"pipeline {target} is a {type(found).__name__}, not a switchyard Pipeline")
    return found


def reference(pipeline: Pipeline) -> str:
    """What finds `pipeline` again in another process: its name when the registry holds it under that name, else
    `module:NAME` where a module (other than `__main__`) holds it at its top level. Refused in one line when
    neither does."""
    registered = available().get(pipeline.name)
    if registered is not None and _load(registered) == pipeline:
        return pipeline.name
    for name, module in list(sys.modules.items()):
        if name == "__main__" or module is None:
            continue
        try:
            held = next((attr for attr, value in vars(module).items() if value is pipeline), None)
        except TypeError:  # a module object without a __dict__
            continue
        if held is not None:
            return f"{name}:{held}"
    raise UserError(f"pipeline {pipeline.name} is neither registered nor held at the top level of an importable "
                    "module, so the stream process cannot find it: define it as a module-level name, or register it "
                    "under the switchyard.pipelines entry point")
