"""The backlog's calendar: one partition per UTC day of event time, from SWITCHYARD_FIRST_DAY on."""

import os
from datetime import date, timedelta

import dagster as dg

# The demo generator's events start on 2026-01-01; a day earlier catches events shifted back by disorder.
FIRST_DAY = os.environ.get("SWITCHYARD_FIRST_DAY", "2025-12-31")

daily = dg.DailyPartitionsDefinition(start_date=FIRST_DAY, timezone="UTC")


def days_of(window: dg.TimeWindow) -> tuple[date, date]:
    """The first and last (inclusive) day of a partition time window."""
    return window.start.date(), (window.end - timedelta(days=1)).date()
