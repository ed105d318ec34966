"""The backlog's calendar: one partition per UTC day of event time, from a pipeline's configured first day
(`PipelineDeployment.first_day`)."""

from datetime import date, timedelta

import dagster as dg


def days_of(window: dg.TimeWindow) -> tuple[date, date]:
    """The first and last (inclusive) day of a partition time window."""
    return window.start.date(), (window.end - timedelta(days=1)).date()
