"""Every asset a pipeline's definition shapes carries the definition's version as its Dagster code version
(state_handoff/language/definition.py), so Dagster marks what was materialized under another definition; the archive, raw
records whatever the definition, carries none. A changed definition deployed under the same name changes them."""

from __future__ import annotations

from datetime import date

import dagster as dg

from switchyard.orchestration import PipelineDeployment, switchyard_definitions
from switchyard.state_handoff.language import definition
from tests.support.changed_pipeline import DEMO, DEMO_PLUS_ONE

SHAPED = ("tiles", "state", "windows", "window_state", "handoff", "stream")


def _code_versions(pipeline) -> dict[str, str | None]:
    defs = switchyard_definitions([PipelineDeployment(pipeline, first_day=date(2026, 1, 1))])
    graph = defs.resolve_asset_graph()
    return {key.path[-1]: graph.get(key).code_version for key in graph.get_all_asset_keys()}


def test_assets_carry_the_definitions_version_and_a_changed_definition_changes_it():
    before, after = _code_versions(DEMO), _code_versions(DEMO_PLUS_ONE)
    assert before["archive"] is None and after["archive"] is None
    assert {before[name] for name in SHAPED} == {definition.version(DEMO)}
    assert {after[name] for name in SHAPED} == {definition.version(DEMO_PLUS_ONE)}
    assert definition.version(DEMO) != definition.version(DEMO_PLUS_ONE)
    dg.Definitions.validate_loadable(switchyard_definitions([PipelineDeployment(DEMO, first_day=date(2026, 1, 1))]))
