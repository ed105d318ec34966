"""The shipped code location: the `demo` pipeline and the `kinds` example side by side, each with its own
asset group, partitions, schedule, sensor, checks and steering jobs; resources from the SWITCHYARD_* settings."""

import os

from orchestration.factory import switchyard_definitions
from orchestration.scope import PipelineDeployment

# The shipped pipelines' calendars start here (SWITCHYARD_FIRST_DAY moves it); the demo archives recent days.
FIRST_DAY = os.environ.get("SWITCHYARD_FIRST_DAY") or "2025-12-01"

defs = switchyard_definitions([PipelineDeployment("demo", first_day=FIRST_DAY),
                               PipelineDeployment("kinds", first_day=FIRST_DAY)])
