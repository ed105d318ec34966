"""The switchyard code location as the orchestration tests build it: the factory's definitions of one or more
pipelines over a test deployment's resources, and its pieces by pipeline and name."""

from __future__ import annotations

import dagster as dg

from switchyard.orchestration.factory import switchyard_definitions
from switchyard.orchestration.scope import PipelineDeployment, Scope

FIRST_DAY = "2025-12-31"  # the generated topics' first day (tests/__init__.py sets SWITCHYARD_FIRST_DAY to it too)


def scope(pipeline: str = "demo") -> Scope:
    return Scope(PipelineDeployment(pipeline, first_day=FIRST_DAY))


def definitions(resources: dict, *pipelines: str) -> dg.Definitions:
    """The factory's definitions of `pipelines` (default: demo) with `resources`."""
    return switchyard_definitions([PipelineDeployment(p, first_day=FIRST_DAY) for p in pipelines or ("demo",)],
                                  resources=resources)


def asset(defs: dg.Definitions, name: str, pipeline: str = "demo") -> dg.AssetsDefinition:
    """The assets definition (without resources, for `dg.materialize`) of the pipeline's asset `name` (`state` for
    the keyed_state multi-asset)."""
    key = scope(pipeline).key(name)
    found = [a for a in defs.assets if key in (a.keys if isinstance(a, dg.AssetsDefinition) else {a.key})]
    assert len(found) == 1, key
    return found[0]


def checks_def(defs: dg.Definitions, name: str, pipeline: str = "demo") -> dg.AssetChecksDefinition:
    """The pipeline's checks definition `name` (a check's name, or `stream_checks` for the multi-check), without
    resources."""
    wanted = {name, scope(pipeline).name(name)}
    found = [c for c in defs.asset_checks if c.node_def.name in wanted
             or any(k.name == name and k.asset_key.path[0] == pipeline for k in c.check_keys)]
    assert len(found) == 1, [c.node_def.name for c in defs.asset_checks]
    return found[0]


def op_name(defs: dg.Definitions, name: str, pipeline: str = "demo") -> str:
    """The op behind the pipeline's asset `name`, as run config names it."""
    return defs.resolve_assets_def(scope(pipeline).key(name)).op.name
