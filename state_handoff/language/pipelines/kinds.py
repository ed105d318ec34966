"""The shipped second example: the demo's events seen per event kind (purchase, view, refund, ...), with means and
quarter-hour windows; the same topic, another key, other aggregations, another window size."""

from datetime import timedelta

from switchyard.state_handoff.language.spec import Field, Pipeline, TumblingWindows, count, last, maximum, mean

PIPELINE = Pipeline(
    name="kinds",
    key="kind",
    event_time="event_time",
    event_id="event_id",
    fields=(
        Field("event_id", "string", required=False),
        Field("kind", "string"),
        Field("event_time", "timestamp"),
        Field("amount", "number"),
    ),
    aggregations=(
        count("events"),
        mean("amount_mean", "amount"),
        maximum("amount_max", "amount"),
        last("last_seen", "event_time"),
    ),
    windows=TumblingWindows(
        size=timedelta(minutes=15),
        allowed_lateness=timedelta(minutes=10),
        aggregations=(count("events"), mean("amount_mean", "amount")),
    ),
    description="per event kind: event count, mean and largest amount, last seen; quarter-hour windows",
)
