"""The shipped code location: the `demo` pipeline and the `kinds` example side by side, each with its own
asset group, partitions, schedule, sensor, checks and steering jobs; resources from the SWITCHYARD_* settings."""

import dagster as dg

from switchyard.orchestration.factory import switchyard_definitions
from switchyard.orchestration.scope import PipelineDeployment
from switchyard.state_handoff import settings

# The shipped pipelines' calendars start at SWITCHYARD_FIRST_DAY; the demo archives recent days.
FIRST_DAY = settings.value("SWITCHYARD_FIRST_DAY")

# One process per run, so that every step shares the run's one SparkSession (a JVM per step costs minutes): the
# executor of this code location, which holds nothing but switchyard.
defs = dg.Definitions.merge(switchyard_definitions([PipelineDeployment("demo", first_day=FIRST_DAY),
                                                    PipelineDeployment("kinds", first_day=FIRST_DAY)]),
                            dg.Definitions(executor=dg.in_process_executor))
