"""The switchyard code location: each domain's definitions merged, with the environment's resources."""

import warnings

import dagster as dg

# observable source assets, single-run backfill policies and partitioned checks are beta/preview in Dagster 1.13
warnings.filterwarnings("ignore", category=dg.BetaWarning)
warnings.filterwarnings("ignore", category=dg.PreviewWarning)

from orchestration import assets, checks, jobs, schedules, sensors  # noqa: E402
from orchestration.resources import resources_for  # noqa: E402


def build_definitions(resources: dict) -> dg.Definitions:
    return dg.Definitions.merge(assets.defs, checks.defs, jobs.defs, schedules.defs, sensors.defs,
                                dg.Definitions(resources=resources))


defs = build_definitions(resources_for())
