"""The commands that take a pipeline from its running stream: `stop` (it drains and logs STOPPED), `redeploy` (a
changed definition switched in at a cut: jobs/rebase/redeploy.py) and `rollback` (back to the definition it replaced), whose
refusals come before any JVM starts or Kafka is contacted."""

from __future__ import annotations

import logging
import sys

from switchyard.jobs.cli.pipeline import (ACCEPT_HELP, command_spark, pipeline_and_tables, pipeline_option,
                                          settle_settings)
from switchyard.jobs.cli.priority import yield_cores
from switchyard.state_handoff import settings

logger = logging.getLogger(__name__)


def run_redeploy_command(args) -> int:
    from switchyard.jobs.rebase.redeploy import drop_previous, redeploy_pipeline

    pipeline, tables = pipeline_and_tables(args)
    if getattr(args, "drop_previous", False):
        drop_previous(tables)
        return 0
    command = "rollback" if args.rollback else "redeploy"
    settle_settings(tables, f"switchyard {command}")  # the pipeline-wide settings; the definition is what changes
    # before the JVM starts, so it runs at this niceness too, in a session of its own: the live stream's batches go
    # first, whichever session runs it
    code = yield_cores(settings.value("SWITCHYARD_REDEPLOY_NICE"), [sys.executable, "-m", "switchyard.jobs.cli",
                                                                   *args.argv])
    if code is not None:
        return code
    redeploy_pipeline(pipeline, tables, args.bootstrap, lambda: command_spark(args, command),
                      timeout_s=args.timeout, accept_differences=args.accept_differences, rollback=args.rollback)
    return 0


def run_stop_command(args) -> int:
    from switchyard.jobs.stop import stop_stream
    from switchyard.state_handoff.control.handoff_log import LogEntry

    _, tables = pipeline_and_tables(args)
    stopped = stop_stream(tables, timeout_s=args.timeout)
    if stopped is None:
        logger.error(f"stop {tables.pipeline}: the stream ended without STOPPED: see `switchyard status` and its "
                     "process.log")
        return 1
    if isinstance(stopped, LogEntry):
        logger.info(f"stop {tables.pipeline}: STOPPED at {stopped.at.isoformat()}")
    return 0


def add_steering_commands(commands, common, spark_conf_option) -> None:
    stop = commands.add_parser("stop", help="stop the pipeline's running stream cleanly (it drains, logs STOPPED)")
    pipeline_option(stop)
    stop.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                      help="how long to wait for STOPPED (default 300)")
    common(stop)
    stop.set_defaults(handler=run_stop_command)

    for name, rollback, what in (
            ("redeploy", False, "switch a changed definition in at a cut: the live stream stopped, the state "
                                "recomputed sort-based from the archive and Kafka under the changed definition, handed "
                                "off there"),
            ("rollback", True, "back to the definition the newest redeploy replaced, run under it: a redeploy at a "
                               "cut whose tiles, kept, are restored instead of tiled again")):
        command = commands.add_parser(name, help=what)
        pipeline_option(command)
        command.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                             help="how long to wait for the live stream to stop (default 300)")
        command.add_argument("--accept-differences", action="store_true", help=ACCEPT_HELP)
        if not rollback:
            command.add_argument("--drop-previous", action="store_true", help="let go of the tiles kept for "
                                 "`switchyard rollback` (no JVM; nothing else is done)")
        common(command)
        spark_conf_option(command)
        command.set_defaults(handler=run_redeploy_command, rollback=rollback)
