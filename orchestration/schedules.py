"""When the backlog is brought up to date without anyone asking."""

import dagster as dg

from orchestration.jobs import backfill_days

backfill_newest_day = dg.build_schedule_from_partitioned_job(
    backfill_days,
    name="backfill_newest_day",
    hour_of_day=0,
    minute_of_hour=30,
    description="Every day at 00:30 UTC: backfill the day that just ended and commit the state.",
)

defs = dg.Definitions(schedules=[backfill_newest_day])
