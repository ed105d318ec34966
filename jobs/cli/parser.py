"""The `switchyard` parser, the options every command shares, and the edge where a UserError or Failed becomes
one line on stderr and an exit code instead of a traceback; the command's log (jobs/log.py) configured around it."""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version

from switchyard.jobs import log
from switchyard.jobs.cli import developer, inputs, observe, pipeline_commands, services, steering
from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import Failed, UserError

LOG_FORMAT_ENV = "SWITCHYARD_LOG_FORMAT"
logger = logging.getLogger(__name__)


def common_options(parser: argparse.ArgumentParser) -> None:
    """--warehouse and --bootstrap, each defaulting to its environment setting."""
    parser.add_argument("--warehouse", default=settings.value("SWITCHYARD_WAREHOUSE"),
                        help="warehouse directory (env SWITCHYARD_WAREHOUSE, default "
                             f"{settings.BY_NAME['SWITCHYARD_WAREHOUSE'].default})")
    parser.add_argument("--bootstrap", default=settings.value("SWITCHYARD_BOOTSTRAP"),
                        help="Kafka bootstrap HOST:PORT (env SWITCHYARD_BOOTSTRAP, default "
                             f"{settings.BY_NAME['SWITCHYARD_BOOTSTRAP'].default})")


def _spark_setting(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.startswith("spark."):
        raise argparse.ArgumentTypeError(f"expected spark.KEY=VALUE, got {text!r}")
    return key, value


def spark_conf_option(parser) -> None:
    """--conf spark.KEY=VALUE (repeatable): Spark settings for this command's session, over switchyard's defaults
    and the platform's (spark-submit's, spark-defaults.conf); a session the process already has is used as it is."""
    parser.add_argument("--conf", dest="spark_conf", action="append", type=_spark_setting, metavar="spark.KEY=VALUE",
                        help="a Spark setting for this command's session (repeatable)")


def _version() -> str:
    try:
        return version("switchyard")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def log_options(parser: argparse.ArgumentParser) -> None:
    """-v, -q and --log-format: the command's log lines (jobs/log.py), given before the command's name."""
    level = parser.add_mutually_exclusive_group()
    level.add_argument("-v", "--verbose", action="store_true", help="also the debug lines")
    level.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors (results still print)")
    parser.add_argument("--log-format", choices=log.FORMATS, default=None,
                        help=f"log lines as text (the message alone) or JSON lines (env {LOG_FORMAT_ENV}, default "
                             f"{settings.BY_NAME[LOG_FORMAT_ENV].default})")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="switchyard", description="Batch-then-stream keyed aggregation: archive and backfill a topic's history "
                                       "in batch, hand off to a stream, and run the stream.",
        epilog="Local servers, demo producers and the smoke check: `switchyard dev --help`. Benchmarks: "
               "`python -m benchmarks --help`.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    log_options(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    pipeline_commands.add_pipeline_commands(commands, common_options, spark_conf_option)
    steering.add_steering_commands(commands, common_options, spark_conf_option)
    observe.add_service_commands(commands, common_options)
    setup_jars = commands.add_parser("setup-jars", help="resolve Spark's Delta, Kafka and S3A jars from Maven Central "
                                                        "into the home now (an installed copy does it on first use)")
    setup_jars.add_argument("--force", action="store_true", help="resolve them again")
    setup_jars.add_argument("--classpath", action="store_true",
                            help="print their paths comma-separated, for `spark-submit --jars` (the driver JVM "
                                 "spark-submit starts needs them on its classpath from the start)")
    setup_jars.set_defaults(handler=_run_setup_jars)
    dev = commands.add_parser("dev", help="developer tools: local Kafka, Spark and object store, demo event "
                                          "producers, the smoke check",
                              description="Developer tools, apart from the commands an operator runs.")
    dev_commands = dev.add_subparsers(dest="dev_command", required=True, metavar="COMMAND")
    services.add_service_commands(dev_commands, common_options)
    inputs.add_generate_command(dev_commands, common_options)
    inputs.add_live_command(dev_commands, common_options)
    developer.add_developer_commands(dev_commands, common_options)
    return parser


def _run_setup_jars(args: argparse.Namespace) -> int:
    from switchyard.deploy.jars import setup_jars

    return setup_jars(force=args.force, classpath=args.classpath)


def command_name(args: argparse.Namespace) -> str:
    """`switchyard stream`, `switchyard dev kafka`: how errors name the command."""
    return " ".join(["switchyard", args.command, *([args.dev_command] if args.command == "dev" else [])])


def run_reporting_errors(name: str, handler: Callable[[], int]) -> int:
    """Run `handler`; a UserError or Failed is one line `NAME: error: ...` on stderr and its exit code, Ctrl-C
    is 130. Other exceptions keep their traceback: they are bugs, not a user's mistake."""
    try:
        return handler()
    except (UserError, Failed) as err:
        print(f"{name}: error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print(f"{name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`switchyard pipelines | head -1`): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


# The commands that run the stream, which needs a classic session: refused before any work under Spark Connect.
CLASSIC_ONLY = ("stream", "serve")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv  # what a command run again in a child of its own is given (jobs/cli/priority.py)
    name = command_name(args)

    def run() -> int:
        from switchyard.jobs.progress import stop_reporting

        # an unset --log-format reads the setting here, inside the edge: a bad value is one line, not a traceback
        log_format = args.log_format or settings.value(LOG_FORMAT_ENV)
        pipeline_name = getattr(args, "pipeline", None)
        with log.configured(log.level_of(args.verbose, args.quiet), log_format, command=name,
                            pipeline=pipeline_name if isinstance(pipeline_name, str) else None):
            try:
                logger.debug(f"{name}: switchyard {_version()}, Python {platform.python_version()}, "
                             f"{sys.executable}")
                if args.command != "config":  # config shows the settings as given, bad ones too
                    in_effect = settings.Settings.from_env()  # a bad setting stops the command here, before any work
                    logger.debug(f"{name}: {in_effect!r}")
                if args.command in CLASSIC_ONLY:
                    from switchyard.deploy.spark import check_classic

                    check_classic()
                return args.handler(args)
            finally:
                stop_reporting()  # the command's progress lines end with it, in a process that lives on

    return run_reporting_errors(name, run)
