"""When the backlog is brought up to date without anyone asking."""

from datetime import timedelta, timezone

import dagster as dg

from orchestration.jobs import backfill_days
from orchestration.partitions import daily


@dg.schedule(job=backfill_days, cron_schedule="30 0 * * *", execution_timezone="UTC",
             default_status=dg.DefaultScheduleStatus.STOPPED,
             description="Every day at 00:30 UTC: backfill the day that just ended and commit the state; a live "
                         "stream is rebased at a cut.")
def backfill_newest_day(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
    day = (context.scheduled_execution_time.astimezone(timezone.utc) - timedelta(days=1)).date()
    if day < daily.start.date():
        return dg.SkipReason(f"{day} is before the first daily partition ({daily.start.date()})")
    return dg.RunRequest(run_key=str(day), partition_key=str(day))


defs = dg.Definitions(schedules=[backfill_newest_day])
