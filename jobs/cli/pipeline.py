"""The operator's commands: pipelines, archive, backfill, handoff, stream, rebase, status, config; each parses
its flags and calls one job. Jobs are imported when their command runs, so `--help` starts no JVM and loads no Spark.
What a command reports is logged (jobs/log.py); what a listing command shows (pipelines, status, config) is printed."""

from __future__ import annotations

import logging

from switchyard.state_handoff import settings as switchyard_settings
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)


def command_spark(args, app: str, progress: bool = True):
    """The command's SparkSession (with its --conf settings); for a batch command, with its progress logged every
    few seconds."""
    from switchyard.deploy.spark import build_spark
    from switchyard.jobs.progress import report_progress

    spark = build_spark(f"switchyard-{app}", extra_conf=dict(args.spark_conf or []))
    if progress:
        report_progress(spark, logger.info, app)
    return spark


PIPELINE_ENV = "SWITCHYARD_PIPELINE"


def pipeline_option(parser) -> None:
    """--pipeline, defaulting to SWITCHYARD_PIPELINE (required when that is unset)."""
    default = switchyard_settings.value(PIPELINE_ENV)
    parser.add_argument("--pipeline", default=default, required=default is None,
                        help=f"the pipeline's name (env {PIPELINE_ENV}" + (f", now {default})" if default else ")"))


def pipeline_and_tables(args):
    from switchyard.state_handoff.language.pipelines import get_pipeline

    pipeline = get_pipeline(args.pipeline)
    check_warehouse(args.warehouse)
    return pipeline, Tables(args.warehouse, pipeline.name)


def check_warehouse(warehouse: str) -> None:
    """A local --warehouse, or the nearest of its folders that exists, must be a folder: refused in one line
    before any work, not a traceback from the first table created under a file."""
    if storage.is_object_store(warehouse):
        return
    import os

    path = os.path.abspath(warehouse)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    if not os.path.isdir(path):
        named = "is a file" if path == os.path.abspath(warehouse) else f"lies under the file {path}"
        raise UserError(f"--warehouse {warehouse} {named}, not a folder: name a folder (it is created when missing) "
                        "or an s3a:// URI")


def settle_settings(tables: Tables, command: str, record: bool = False, pipeline=None) -> None:
    """The pipeline-wide settings (state_handoff/control/pins.py): a value other than the pipeline's recorded
    one refused in one line, an unset one taken from the record; with `record`, recorded where none is yet; with
    `pipeline`, a definition other than the recorded one refused. Called before a JVM starts or Kafka is contacted."""
    from switchyard.state_handoff.control.pins import settle

    settle(tables, command, record=record, pipeline=pipeline)


def run_archive_command(args) -> int:
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.state_handoff.control import lease

    pipeline, tables = pipeline_and_tables(args)
    settle_settings(tables, lease.ARCHIVE)
    if args.from_connect:
        from switchyard.jobs.connect_archive import connect_files, import_connect_archive

        connect_files(args.from_connect, args.topic)  # a path without the sink's files fails before Spark starts
        with lease.hold(tables.archive_writer(), lease.ARCHIVE) as held:
            settle_settings(tables, lease.ARCHIVE, record=True)
            logger.info(import_connect_archive(command_spark(args, "archive"), pipeline, tables, args.from_connect,
                                               args.bootstrap, args.topic, lease=held))
        return 0
    if not args.topic:
        raise UserError("name the topic with --topic (or take in a Kafka Connect archive with "
                        "--from-connect PATH)")
    cut = archive_cut(args.bootstrap, args.topic, args.fraction, args.until_offsets)
    # one writer of the archive at a time (another run would remove this one's files as orphans); the stream, a
    # backfill and a handoff hold the pipeline's lease and read only what the record has committed
    with lease.hold(tables.archive_writer(), lease.ARCHIVE) as held:
        settle_settings(tables, lease.ARCHIVE, record=True)
        logger.info(run_archive(command_spark(args, "archive"), pipeline, tables, args.bootstrap, args.topic, cut,
                                lease=held))
    return 0


ACCEPT_HELP = ("at a rebase's cut, replace the streamed state with the recomputed one even where they differ "
               "(without it, differences stop the rebase and the stream streams on)")


def _rebase(args) -> int:
    """A backfill or rebase once a handoff exists: through the live stream, or by this process (jobs/rebase/run.py)."""
    from switchyard.jobs.rebase.run import rebase_pipeline
    from switchyard.jobs.stream import stream_until_caught_up

    pipeline, tables = pipeline_and_tables(args)
    rebase_pipeline(pipeline, tables, args.bootstrap, args.command, f"switchyard {args.command}",
                    lambda: command_spark(args, args.command), days=(args.from_day, args.to_day),
                    timeout_s=args.timeout,
                    no_rebase=getattr(args, "no_rebase", False), accept_differences=args.accept_differences,
                    finish_stream=stream_until_caught_up(pipeline, tables, args.bootstrap))
    return 0


def run_rebase_command(args) -> int:
    from switchyard.state_handoff.control.handoffs import current_handoff

    pipeline, tables = pipeline_and_tables(args)
    if not args.abandon:
        settle_settings(tables, f"switchyard {args.command}", pipeline=pipeline)
    if current_handoff(tables) is None:
        raise UserError(f"pipeline {pipeline.name} has no committed handoff to rebase: run `switchyard backfill` "
                        "and `switchyard handoff` first")
    if args.abandon:
        from switchyard.jobs.rebase.requests import abandon_rebase

        if args.from_day or args.to_day or args.accept_differences:
            raise UserError("--abandon gives up the open rebase request: drop --from, --to and --accept-differences")
        abandon_rebase(tables, "switchyard rebase --abandon")
        return 0
    return _rebase(args)


def run_backfill_command(args) -> int:
    from switchyard.jobs.backfill import run_backfill
    from switchyard.state_handoff.control import lease
    from switchyard.state_handoff.control.handoffs import current_handoff

    pipeline, tables = pipeline_and_tables(args)
    settle_settings(tables, lease.BACKFILL, pipeline=pipeline)
    if current_handoff(tables) is not None:  # a stream's history exists: the backfill rebases at a cut
        if args.kafka_tail:
            raise UserError(f"pipeline {pipeline.name} already streams: a backfill now rebases it at a cut and reads "
                            "Kafka up to that cut anyway; drop --kafka-tail")
        return _rebase(args)
    with lease.hold(tables, lease.BACKFILL):  # taken before the JVM starts, so a refusal costs none
        settle_settings(tables, lease.BACKFILL, record=True)
        result = run_backfill(command_spark(args, "backfill"), pipeline, tables, args.from_day, args.to_day,
                              skip_bad_files=args.skip_bad_files, strategy=args.aggregation,
                              kafka_tail_from=args.bootstrap if args.kafka_tail else None)
    logger.info(result.summary(pipeline.name))
    return 0


def run_handoff_command(args) -> int:
    from switchyard.jobs.handoff import parse_boundary_time, run_handoff
    from switchyard.state_handoff.control import lease

    pipeline, tables = pipeline_and_tables(args)
    settle_settings(tables, lease.HANDOFF, pipeline=pipeline)
    at = parse_boundary_time(args.at) if args.at is not None else None
    if at is not None and args.boundary != "time":
        raise UserError("--at applies only with --boundary time")
    if args.restart_from_retained:
        from switchyard.state_handoff.control.lost_offsets import lost_ranges, restart_from_retained
        from switchyard.state_handoff.control.view import PipelineView

        if args.boundary is not None or at is not None:
            raise UserError("--restart-from-retained keeps the committed handoff's boundary: drop --boundary and --at")
        with lease.hold(tables, lease.HANDOFF):  # no JVM: the log and Kafka's offsets only
            switch = restart_from_retained(tables, args.bootstrap)
        lost = ", ".join(f"p{r['partition']}:{r['from']}..{r['to'] - 1} ({r['records']} records)"
                         for r in lost_ranges(PipelineView.read(tables).entries) if r["handoff_id"] == switch.handoff_id)
        logger.info(f"{switch.summary(pipeline.name)}; lost to Kafka's retention, read by neither phase: {lost}")
        return 0
    with lease.hold(tables, lease.HANDOFF):
        switch = run_handoff(command_spark(args, "handoff"), pipeline, tables, args.bootstrap, boundary=args.boundary,
                             at=at)
    logger.info(switch.summary(pipeline.name))
    return 0


def run_stream_command(args) -> int:
    import signal

    stop_signal: list[str] = []  # from the process's start: `serve` may stop its stream at any moment
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda s, _f: stop_signal.append(signal.Signals(s).name))
    from switchyard.jobs.metrics import check_port, served
    from switchyard.jobs.stream import StreamOptions, run_stream
    from switchyard.jobs.stream.resume_checks import refuse_another_spark_line
    from switchyard.state_handoff.control import lease

    pipeline, tables = pipeline_and_tables(args)
    settle_settings(tables, lease.STREAM, pipeline=pipeline)
    settings = StreamOptions(until_caught_up=args.until_caught_up, for_seconds=args.for_seconds,
                              caught_up_lag=args.caught_up_lag, falling_behind_lag=args.falling_behind_lag,
                              max_offsets_per_trigger=args.max_offsets_per_trigger,
                              trigger_seconds=args.trigger_seconds,
                              tables_trigger_seconds=args.tables_trigger_seconds,
                              switch_back_lag=None if args.no_switch_back else args.switch_back_lag,
                              switch_back_after=args.switch_back_after, state_partitions=args.state_partitions)
    if args.metrics_port is not None:
        check_port(args.metrics_port, "--metrics-port")
    refuse_another_spark_line(pipeline, tables)
    with lease.hold(tables, lease.STREAM) as held, served([tables], args.bootstrap, args.metrics_port,
                                                          args.metrics_address, f"stream {pipeline.name}"):
        settle_settings(tables, lease.STREAM, record=True)
        result = run_stream(command_spark(args, "stream", progress=False), pipeline, tables, args.bootstrap, settings,
                            lease=held, stop_signal=stop_signal)
    logger.info(result.summary(pipeline.name))
    return 0


def run_status_command(args) -> int:
    import json

    from switchyard.state_handoff.control.status import format_status, pipeline_status

    pipeline, tables = pipeline_and_tables(args)
    if not any(storage.exists(path) for path in (storage.join(tables.handoffs, "_delta_log"),
                                                 storage.join(tables.leases, "_delta_log"), tables.archive)):
        raise UserError(f"pipeline {pipeline.name} has nothing in warehouse {tables.warehouse} (no {tables.root}): "
                        "check --warehouse and --pipeline, or start it with `switchyard archive`")
    status = pipeline_status(tables, args.bootstrap, pipeline=pipeline)
    print(json.dumps(status, indent=2, default=str) if args.json else format_status(status))
    return 0


def run_config_command(args) -> int:
    from switchyard.state_handoff.settings import effective

    rows = effective()
    if args.pipeline is not None:  # the pipeline-wide settings a process leaves unset are the pipeline's
        from switchyard.state_handoff.control import pins as pipeline_settings

        _, tables = pipeline_and_tables(args)
        if args.record is not None:
            logger.info(pipeline_settings.change(tables, args.record, "switchyard config --record"))
            return 0
        recorded = pipeline_settings.recorded(tables)
        rows = [(setting, recorded[setting.name], f"recorded with pipeline {tables.pipeline}")
                if source != "environment" and setting.name in recorded else (setting, value, source)
                for setting, value, source in rows]
    elif args.record is not None:
        raise UserError("--record changes a pipeline's recorded setting: name the pipeline with --pipeline")
    width = max(len(setting.name) for setting, _, _ in rows)
    for setting, value, source in rows:
        print(f"{setting.name:<{width}}  " + ("(unset)" if value is None else f"{value}  ({source})"))
    return 0


def run_pipelines_command(args) -> int:
    from switchyard.state_handoff.language.pipelines import available, get_pipeline

    for name, target in sorted(available().items()):
        spec = get_pipeline(name)
        windows = f", windows of {spec.windows.size}" if spec.windows else ""
        keys = ", ".join(spec.keys)
        print(f"{name}  (key {keys}{windows}; {target})" + (f"\n    {spec.description}" if spec.description else ""))
    return 0
