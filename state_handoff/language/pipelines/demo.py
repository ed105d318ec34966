"""The shipped demo pipeline: per-key totals and hourly windows over JSON purchase-like events."""

from datetime import timedelta

from switchyard.state_handoff.language.spec import (Field, Pipeline, TumblingWindows, count, last, maximum, minimum,
                                                    total)

PIPELINE = Pipeline(
    name="demo",
    key="key",
    event_time="event_time",
    event_id="event_id",
    fields=(
        Field("event_id", "string", required=False),
        Field("key", "string"),
        Field("event_time", "timestamp"),
        Field("amount", "number"),
        Field("kind", "string", required=False),
    ),
    aggregations=(
        count("event_count"),
        total("amount_sum", "amount"),
        minimum("amount_min", "amount"),
        maximum("amount_max", "amount"),
        last("last_event_time", "event_time"),
        last("last_amount", "amount"),
    ),
    windows=TumblingWindows(
        size=timedelta(hours=1),
        allowed_lateness=timedelta(minutes=10),
        aggregations=(count("event_count"), total("amount_sum", "amount")),
    ),
    description="per-key event count, amount sum/min/max, last event; hourly windows with 10 minutes lateness",
)
