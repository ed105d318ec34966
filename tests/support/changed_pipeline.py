"""The demo pipeline as a team would change it: one aggregation added (`--pipeline
tests.support.changed_pipeline:DEMO_PLUS_ONE`), under the same name, so over the same tables."""

import dataclasses

from switchyard.state_handoff.pipelines import get_pipeline
from switchyard.state_handoff.spec import maximum

DEMO = get_pipeline("demo")
DEMO_PLUS_ONE = dataclasses.replace(DEMO, aggregations=DEMO.aggregations + (maximum("largest2", "amount"),))
# ... and with its windows' lateness doubled: a change no cut takes
DEMO_LATER = dataclasses.replace(DEMO, windows=dataclasses.replace(
    DEMO.windows, allowed_lateness=DEMO.windows.allowed_lateness * 2))
