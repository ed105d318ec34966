"""The demo pipeline as a team would change it, under the same name, so over the same tables: one aggregation added
(`--pipeline tests.support.changed_pipeline:DEMO_PLUS_ONE`); its windows widened from one hour to two, with their
lateness doubled and one aggregation added (DEMO_WIDER), then one aggregation renamed, then the lateness changed again;
its windows taken away (DEMO_UNWINDOWED, a change no cut takes); its `kind` made required (DEMO_KIND: records without
one are malformed), and that keyed by key and kind together (DEMO_BY_KIND)."""

import dataclasses
from datetime import timedelta

from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.language.spec import maximum

DEMO = get_pipeline("demo")
DEMO_PLUS_ONE = dataclasses.replace(DEMO, aggregations=DEMO.aggregations + (maximum("largest2", "amount"),))
DEMO_WIDER = dataclasses.replace(DEMO, windows=dataclasses.replace(
    DEMO.windows, size=timedelta(hours=2), allowed_lateness=DEMO.windows.allowed_lateness * 2,
    aggregations=DEMO.windows.aggregations + (maximum("amount_max", "amount"),)))
# ... and then its `amount_max` renamed `largest`: nothing recomputed, the tiles' column renamed
DEMO_WIDER_RENAMED = dataclasses.replace(DEMO_WIDER, aggregations=tuple(
    dataclasses.replace(a, name="largest") if a.name == "amount_max" else a for a in DEMO_WIDER.aggregations))
# ... and then its windows' lateness changed: the tiles serve as they are, the windows are made again at the cut
DEMO_WIDER_LATER = dataclasses.replace(DEMO_WIDER_RENAMED, windows=dataclasses.replace(
    DEMO_WIDER_RENAMED.windows, allowed_lateness=timedelta(minutes=30)))
DEMO_UNWINDOWED = dataclasses.replace(DEMO, windows=None)

DEMO_KIND = dataclasses.replace(DEMO, fields=tuple(dataclasses.replace(f, required=True) if f.name == "kind" else f
                                                   for f in DEMO.fields))
DEMO_BY_KIND = dataclasses.replace(DEMO_KIND, key=("key", "kind"))
