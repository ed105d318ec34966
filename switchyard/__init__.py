"""switchyard: a keyed aggregation processed batch-style over its backlog, then handed over exactly once to a
Spark Structured Streaming job that keeps it current.

The public API, each name imported on first use (importing `switchyard` loads neither Spark nor Dagster, so the
command line starts fast and executors unpickle the transforms without the orchestration):

    from switchyard import Pipeline, Field, TumblingWindows, count, total, mean   # declare a pipeline
    from switchyard import switchyard_definitions, PipelineDeployment              # deploy it in Dagster
    from switchyard import Settings                                                 # the settings in effect

The installed package maps the repository's folders into this one import name: `switchyard.jobs` (the batch
and streaming jobs, the `switchyard` command), `switchyard.state_handoff` (the pipeline language, the handoff
log, tables and I/O), `switchyard.orchestration` (Dagster) and `switchyard.deploy` (sessions and local servers).
"""

from __future__ import annotations

from importlib import import_module

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    **{name: "switchyard.state_handoff.language.spec" for name in (
        "Pipeline", "Field", "AvroFormat", "TumblingWindows", "HoppingWindows", "Aggregation",
        "count", "total", "minimum", "maximum", "mean", "variance", "stddev", "first", "last", "approx_distinct")},
    "get_pipeline": "switchyard.state_handoff.language.pipelines",
    "Settings": "switchyard.state_handoff.settings",
    "UserError": "switchyard.state_handoff.errors",
    "switchyard_definitions": "switchyard.orchestration.factory",
    "PipelineDeployment": "switchyard.orchestration.scope",
    "SwitchyardTranslator": "switchyard.orchestration.scope",
    "SwitchyardComponent": "switchyard.orchestration.component",
}

__all__ = ["__version__", *_PUBLIC]


_NEEDS_EXTRA = {"dagster": "dagster", "great_expectations": "dagster"}


def __getattr__(name: str):
    if name in _PUBLIC:
        try:
            module = import_module(_PUBLIC[name])
        except ModuleNotFoundError as missing:
            extra = _NEEDS_EXTRA.get((missing.name or "").split(".")[0])
            if extra is None:
                raise
            raise ImportError(f"switchyard.{name} needs the {extra} extra: pip install 'switchyard[{extra}]'") from None
        value = getattr(module, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'switchyard' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
