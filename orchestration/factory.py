"""Dagster definitions for any number of pipelines: `switchyard_definitions([PipelineDeployment(...), ...])`.

Per pipeline: an asset group whose keys carry the pipeline's name (archive, tiles, state, windows, window_state,
handoff, stream), its daily partitions, its schedule, its `stream_health` sensor, its checks and its steering jobs
(rebase, stop); a `SwitchyardTranslator` renames them. The resources (Spark, Kafka, the warehouse, the stream
monitor's thresholds) are shared, under the keys `switchyard_spark`, `switchyard_kafka`, `switchyard_warehouse` and
`switchyard_monitor`: each pipeline's tables live in its own folder of the warehouse. No executor is set for the code
location: switchyard's own jobs run in one process (every step shares the run's one SparkSession), and a project
chooses its own default.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import dagster as dg

from switchyard.orchestration import assets, checks, jobs, schedules, sensors
from switchyard.orchestration.resources import resources_for
from switchyard.orchestration.scope import PipelineDeployment, Scope, SwitchyardTranslator
from switchyard.state_handoff.errors import UserError


def pipeline_definitions(scope: Scope) -> dg.Definitions:
    """One pipeline's definitions, without resources."""
    with warnings.catch_warnings():  # observable source assets and single-run backfills are beta in Dagster 1.13
        warnings.simplefilter("ignore", dg.BetaWarning)
        pipeline_jobs, backfill_days = jobs.build(scope)
        return dg.Definitions.merge(assets.build(scope), checks.build(scope), pipeline_jobs,
                                    schedules.build(scope, backfill_days), sensors.build(scope))


def switchyard_definitions(pipelines: Sequence[PipelineDeployment], *, resources: dict | None = None,
                           translator: SwitchyardTranslator | None = None) -> dg.Definitions:
    """The Definitions of `pipelines`, side by side, with `resources` (default: `resources_for()`, read from the
    SWITCHYARD_* settings) and names from `translator` (default: keys `<pipeline>/<asset>`, group `<pipeline>`,
    definitions `<pipeline>__<name>`)."""
    if not pipelines:
        raise UserError("switchyard_definitions: name at least one pipeline")
    translator = translator or SwitchyardTranslator()
    scopes = [Scope(p, translator) for p in pipelines]
    for scope in scopes:
        scope.reference  # an unknown or unreachable pipeline fails here, in one line, as the code location loads
    names = [s.pipeline for s in scopes]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"switchyard_definitions: pipeline {twice[0]} is deployed twice: deploy each pipeline once")
    return dg.Definitions.merge(*[pipeline_definitions(s) for s in scopes],
                                dg.Definitions(resources=resources if resources is not None else resources_for()))
