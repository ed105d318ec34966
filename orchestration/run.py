"""Run a job of the switchyard code location in the Dagster instance at $DAGSTER_HOME (the one `make ui` shows),
through Dagster's Python API, over a range of daily partitions:

    python -m switchyard.orchestration.run --pipeline demo --job backfill_then_stream --from DAY --to DAY
"""

from __future__ import annotations

import argparse
import sys

from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError

RANGE_START, RANGE_END = "dagster/asset_partition_range_start", "dagster/asset_partition_range_end"
JOBS = ("backfill_then_stream", "backfill_days", "rebase_stream", "stop_stream")


def run_job(pipeline: str, job: str, first: str | None, last: str | None, stream_config: dict | None = None) -> bool:
    """Run the pipeline's `job` in process, over the days `first`..`last` when given; True when the run
    succeeded. `stream_config` configures the job's stream asset."""
    import dagster as dg

    from switchyard.orchestration.definitions import defs
    from switchyard.orchestration.scope import SwitchyardTranslator

    names = SwitchyardTranslator()  # the shipped code location's
    try:
        job_def = defs.resolve_job_def(names.get_definition_name(pipeline, job))
    except dg.DagsterInvariantViolationError:
        raise UserError(f"pipeline {pipeline} has no job {job} in the switchyard code location") from None
    tags = {}
    if first or last:
        first, last = first or last, last or first
        keys = job_def.partitions_def.get_partition_keys()
        missing = [day for day in (first, last) if day not in keys]
        if missing:
            raise UserError(f"day {missing[0]} is not a daily partition (they run {keys[0]}..{keys[-1]}): "
                            "set SWITCHYARD_FIRST_DAY or archive that day first")
        tags = {RANGE_START: first, RANGE_END: last}
    run_config = {"loggers": {"console": {"config": {"log_level": "INFO"}}}}
    if stream_config:
        stream_op = defs.resolve_assets_def(names.get_asset_key(pipeline, "stream")).op.name
        run_config["ops"] = {stream_op: {"config": stream_config}}
    with dg.DagsterInstance.get() as instance:
        result = job_def.execute_in_process(run_config=run_config, instance=instance, tags=tags,
                                            raise_on_error=False)
    print(f"switchyard: Dagster run {result.run_id} of {job_def.name}: {'SUCCESS' if result.success else 'FAILURE'}")
    return result.success


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m switchyard.orchestration.run", description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", default=settings.value("SWITCHYARD_PIPELINE") or "demo",
                        help="the pipeline whose job runs (default: SWITCHYARD_PIPELINE, else demo)")
    parser.add_argument("--job", required=True, choices=JOBS)
    parser.add_argument("--from", dest="first", help="first day of the partition range (YYYY-MM-DD)")
    parser.add_argument("--to", dest="last", help="last day of the partition range (YYYY-MM-DD)")
    parser.add_argument("--detach-stream", action="store_true",
                        help="the stream asset returns once SWITCHED and the stream outlives the run")
    parser.add_argument("--caught-up-lag", type=int, default=0,
                        help="the stream's caught-up bar in offsets behind (live input never leaves it at 0)")
    args = parser.parse_args(argv)
    stream = {"caught_up_lag": args.caught_up_lag, **({"until_caught_up": False} if args.detach_stream else {})}
    try:
        return 0 if run_job(args.pipeline, args.job, args.first, args.last,
                            stream if args.detach_stream or args.caught_up_lag else None) else 1
    except UserError as err:
        print(f"switchyard: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
