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
        from switchyard.state_handoff.control.view import PipelineView
        from switchyard.state_handoff.stream.lost_offsets import lost_ranges, restart_from_retained

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
                            lease=held)
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


def add_pipeline_commands(commands, common, spark_conf_option) -> None:
    pipelines = commands.add_parser("pipelines", help="the registered pipelines: name, key, windows, where declared")
    pipelines.set_defaults(handler=run_pipelines_command)

    archive = commands.add_parser("archive", help="archive a topic up to a cut into Parquet day folders")
    pipeline_option(archive)
    archive.add_argument("--topic", help="the topic (with --from-connect: needed only when the files hold several)")
    cut = archive.add_mutually_exclusive_group(required=True)
    cut.add_argument("--fraction", type=float, help="archive this share of each partition (0..1)")
    cut.add_argument("--until-offsets", help='JSON of partition to exclusive end offset, e.g. {"0": 1200}')
    cut.add_argument("--from-connect", metavar="PATH", help="take in the files Kafka Connect's S3 sink wrote below "
                                                            "PATH (<topic>+<partition>+<startOffset>.json|parquet)")
    common(archive)
    spark_conf_option(archive)
    archive.set_defaults(handler=run_archive_command)

    backfill = commands.add_parser("backfill", help="sort-based aggregation of archived days into Delta state")
    pipeline_option(backfill)
    backfill.add_argument("--from", dest="from_day", metavar="DATE", help="first day (default: first archived)")
    backfill.add_argument("--to", dest="to_day", metavar="DATE", help="last day, inclusive (default: last archived)")
    backfill.add_argument("--skip-bad-files", action="store_true",
                          help="skip unreadable Parquet files (recorded in the handoff log) instead of stopping")
    backfill.add_argument("--aggregation", choices=["sort", "hash"], default="sort",
                          help="sort-based (default, FLIP-140) or Spark's hash aggregation")
    backfill.add_argument("--kafka-tail", action="store_true",
                          help="also aggregate the archived topic's records after the archive, up to its end now, "
                               "in batch: the handoff then starts the stream there, with no backlog to stream")
    backfill.add_argument("--no-rebase", action="store_true",
                          help="refuse instead of rebasing when a stream is live")
    backfill.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                          help="how long to wait for a live stream's rebase (default 3600)")
    backfill.add_argument("--accept-differences", action="store_true", help=ACCEPT_HELP)
    common(backfill)
    spark_conf_option(backfill)
    backfill.set_defaults(handler=run_backfill_command)

    rebase = commands.add_parser("rebase", help="stream -> backlog -> stream at a cut (the live stream, or offline)")
    pipeline_option(rebase)
    rebase.add_argument("--from", dest="from_day", metavar="DATE", help="also re-tile archived days from DATE")
    rebase.add_argument("--to", dest="to_day", metavar="DATE", help="... to DATE, inclusive")
    rebase.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="how long to wait for the live stream's rebase (default 3600)")
    rebase.add_argument("--accept-differences", action="store_true", help=ACCEPT_HELP)
    rebase.add_argument("--abandon", action="store_true",
                        help="give up the open rebase request instead: one a failure or a crash left paused at its "
                             "cut, while the paused stream can still resume (the next `stream` resumes it from its "
                             "checkpoint with its streamed state), or one not yet paused")
    common(rebase)
    spark_conf_option(rebase)
    rebase.set_defaults(handler=run_rebase_command)

    handoff = commands.add_parser(
        "handoff", help="commit the switch: start offsets, backlog watermark, state version",
        description="Commit the switch from the latest backfill: start offsets, backlog watermark, state version.",
        epilog="Boundary modes. offsets (default): each partition starts right after the highest archived offset; "
               "exact, and every record counts once even when event_ids repeat; needs archived offsets that are "
               "positions in this topic. time: for an archive without usable Kafka coordinates (written from a "
               "mirror or an earlier incarnation of the topic, or by a sink that drops them); each partition "
               "starts at Kafka's offset for time T (--at, default: newest archived Kafka timestamp minus the "
               "allowed lateness), and the stream skips records it reads again that the archive already holds "
               "(same event_id, or for records without one the same Kafka key and raw value, with a Kafka "
               "timestamp up to the newest archived one). It assumes the archive holds every record before T; "
               "a new record reusing an archived event_id inside that overlap is skipped too.")
    pipeline_option(handoff)
    handoff.add_argument("--boundary", choices=["offsets", "time"], default=None,
                         help="where the stream starts: after the archived offsets (default) or at a time T")
    handoff.add_argument("--restart-from-retained", action="store_true",
                         help="recover a committed handoff whose start offsets Kafka's retention deleted before its "
                              "stream ran: a new handoff over the same state from the earliest retained offsets, "
                              "the deleted records recorded as lost in the log and in `switchyard status`")
    handoff.add_argument("--at", metavar="ISO_TIME",
                         help="T for --boundary time, e.g. 2026-01-02T09:30:00Z (default: newest archived Kafka "
                              "timestamp minus the pipeline's allowed lateness)")
    common(handoff)
    spark_conf_option(handoff)
    handoff.set_defaults(handler=run_handoff_command)

    stream = commands.add_parser("stream", help="Structured Streaming from the handoff, seeded once from the state")
    pipeline_option(stream)
    stop = stream.add_mutually_exclusive_group()
    stop.add_argument("--until-caught-up", action="store_true", help="stop cleanly once CAUGHT_UP")
    stop.add_argument("--for", dest="for_seconds", type=float, metavar="SECONDS", help="stop cleanly after SECONDS")
    stream.add_argument("--caught-up-lag", type=int, default=0,
                        help="offsets behind latest (summed over partitions) at or under which the stream is caught up")
    stream.add_argument("--falling-behind-lag", type=int, default=None,
                        help="offsets behind latest past which a caught-up stream is falling behind "
                             "(default 10 x --caught-up-lag, at least 1000)")
    stream.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    stream.add_argument("--trigger-seconds", type=float, default=0.0, help="micro-batch interval (0: back to back)")
    stream.add_argument("--switch-back-lag", type=int, default=1_000_000, metavar="N",
                        help="offsets behind latest past which, held --switch-back-after seconds, the stream "
                             "rebases itself through the batch path (default 1000000)")
    stream.add_argument("--switch-back-after", type=float, default=30.0, metavar="SECONDS")
    stream.add_argument("--no-switch-back", action="store_true", help="never switch back on lag")
    stream.add_argument("--tables-trigger-seconds", type=float, default=5.0,
                        help="interval of the Delta-writing queries (dead letters, late, windows, state)")
    stream.add_argument("--state-partitions", type=int, metavar="N",
                        help="state-store partitions of a handoff's new checkpoints, fixed for that handoff "
                             "(env SWITCHYARD_STATE_PARTITIONS, default 2)")
    stream.add_argument("--metrics-port", type=int, metavar="PORT",
                        help="serve the pipeline's Prometheus metrics on PORT while streaming (0: any free one)")
    stream.add_argument("--metrics-address", default="127.0.0.1", help="the metrics' address (default 127.0.0.1)")
    common(stream)
    spark_conf_option(stream)
    stream.set_defaults(handler=run_stream_command)


    status = commands.add_parser("status", help="phase, handoff, offsets, watermarks, lag, rates, counts")
    pipeline_option(status)
    status.add_argument("--json", action="store_true")
    common(status)
    status.set_defaults(handler=run_status_command)

    config = commands.add_parser("config", help="every SWITCHYARD_* setting: the value in effect and where it came "
                                                "from")
    config.add_argument("--pipeline", help="also the settings recorded with this pipeline, which every process of "
                                           "it shares (SWITCHYARD_MAX_RECORD_BYTES)")
    config.add_argument("--record", metavar="NAME=VALUE",
                        help="with --pipeline: record VALUE as the pipeline's NAME (only before it has classified "
                             "records: nothing archived, backfilled or handed off yet)")
    common(config)
    config.set_defaults(handler=run_config_command)
