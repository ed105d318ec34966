"""When a pipeline's backlog is brought up to date without anyone asking."""

from datetime import timedelta, timezone
from typing import TYPE_CHECKING

import dagster as dg

from switchyard.orchestration.scope import Scope

if TYPE_CHECKING:
    from dagster._core.definitions.unresolved_asset_job_definition import UnresolvedAssetJobDefinition


def build(scope: Scope, backfill_days: "UnresolvedAssetJobDefinition") -> dg.Definitions:
    running = scope.deployment.schedule_running
    cron = scope.deployment.backfill_cron

    @dg.schedule(name=scope.name("backfill_newest_day"), job=backfill_days, cron_schedule=cron,
                 execution_timezone="UTC",
                 default_status=dg.DefaultScheduleStatus.RUNNING if running else dg.DefaultScheduleStatus.STOPPED,
                 description=f"Pipeline {scope.pipeline}, on `{cron}` (UTC): backfill the day that just ended and "
                             "commit the state; a live stream is rebased at a cut.")
    def backfill_newest_day(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        day = (context.scheduled_execution_time.astimezone(timezone.utc) - timedelta(days=1)).date()
        if day < scope.deployment.first_day:
            return dg.SkipReason(f"{day} is before the first daily partition ({scope.deployment.first_day})")
        return dg.RunRequest(run_key=str(day), partition_key=str(day))

    return dg.Definitions(schedules=[backfill_newest_day])
