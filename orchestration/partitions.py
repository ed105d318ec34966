"""The backlog's calendar: one partition per UTC day of event time, from the archive's first day (or
SWITCHYARD_FIRST_DAY) to today."""

import os
from datetime import date, timedelta

import dagster as dg

from orchestration.resources import DEFAULT_PIPELINE, DEFAULT_WAREHOUSE
from state_handoff.clock import utc_now
from state_handoff.errors import UserError
from state_handoff.io.archive_files import list_archive
from state_handoff.tables import Tables

FIRST_DAY_ENV = "SWITCHYARD_FIRST_DAY"


def archive_first_day(tables: Tables) -> date | None:
    """The first day with archived events; None while nothing is archived."""
    try:
        days = [f.day for f in list_archive(tables.archive)]
    except (UserError, OSError):
        return None
    return min(days, default=None)


def first_day(environ=os.environ) -> str:
    """Where the calendar starts: SWITCHYARD_FIRST_DAY when set, else the first archived day of the deployment's
    warehouse as the code location loads (reload it once an archive exists), else today."""
    configured = environ.get(FIRST_DAY_ENV)
    if configured:
        try:
            return date.fromisoformat(configured).isoformat()
        except ValueError:
            raise UserError(f"{FIRST_DAY_ENV}={configured}: give the first daily partition as YYYY-MM-DD") from None
    tables = Tables(environ.get("SWITCHYARD_WAREHOUSE", DEFAULT_WAREHOUSE),
                    environ.get("SWITCHYARD_PIPELINE", DEFAULT_PIPELINE))
    first = archive_first_day(tables) or utc_now().date()
    return first.isoformat()


daily = dg.DailyPartitionsDefinition(start_date=first_day(), timezone="UTC")


def days_of(window: dg.TimeWindow) -> tuple[date, date]:
    """The first and last (inclusive) day of a partition time window."""
    return window.start.date(), (window.end - timedelta(days=1)).date()
