"""The switchyard code location: each domain's definitions merged, with the environment's resources."""

import dagster as dg

from orchestration import assets, checks, jobs, schedules, sensors
from orchestration.resources import resources_for


def build_definitions(resources: dict) -> dg.Definitions:
    # One process per run, so that every step shares the run's one SparkSession (a JVM per step costs minutes).
    return dg.Definitions.merge(assets.defs, checks.defs, jobs.defs, schedules.defs, sensors.defs,
                                dg.Definitions(resources=resources, executor=dg.in_process_executor))


defs = build_definitions(resources_for())
