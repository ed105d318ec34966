"""Pipeline subcommands of the command line: each parses its flags and calls one job function."""

from __future__ import annotations

from state_handoff.tables import Tables


def _spark(app: str):
    from deploy.spark import build_spark

    return build_spark(f"switchyard-{app}")


def _pipeline_and_tables(args):
    from state_handoff.pipelines import get_pipeline

    pipeline = get_pipeline(args.pipeline)
    return pipeline, Tables(args.warehouse, pipeline.name)


def run_archive_command(args) -> int:
    from jobs.archive import archive_cut, run_archive

    pipeline, tables = _pipeline_and_tables(args)
    cut = archive_cut(args.bootstrap, args.topic, args.fraction, args.until_offsets)
    print(run_archive(_spark("archive"), pipeline, tables, args.bootstrap, args.topic, cut))
    return 0


def run_backfill_command(args) -> int:
    from jobs.backfill import run_backfill

    pipeline, tables = _pipeline_and_tables(args)
    result = run_backfill(_spark("backfill"), pipeline, tables, args.from_day, args.to_day,
                          skip_bad_files=args.skip_bad_files, strategy=args.aggregation)
    print(result.summary(pipeline.name))
    return 0


def run_handoff_command(args) -> int:
    from state_handoff.handoff import run_handoff
    from state_handoff.stream_control import stream_running

    pipeline, tables = _pipeline_and_tables(args)
    if stream_running(tables):
        from state_handoff.errors import UserError
        raise UserError(f"the stream of pipeline {pipeline.name} is running: stop it before a new handoff")
    print(run_handoff(_spark("handoff"), pipeline, tables, args.bootstrap).summary(pipeline.name))
    return 0


def run_stream_command(args) -> int:
    from jobs.stream import StreamSettings, run_stream
    from state_handoff.errors import UserError
    from state_handoff.stream_control import stream_running

    pipeline, tables = _pipeline_and_tables(args)
    if stream_running(tables):  # refuse before paying for a JVM; the lock in run_stream is what guarantees it
        raise UserError(f"a stream for pipeline {pipeline.name} is already running: stop it before starting another")
    settings = StreamSettings(until_caught_up=args.until_caught_up, for_seconds=args.for_seconds,
                              caught_up_lag=args.caught_up_lag, falling_behind_lag=args.falling_behind_lag,
                              max_offsets_per_trigger=args.max_offsets_per_trigger,
                              trigger_seconds=args.trigger_seconds)
    print(run_stream(_spark("stream"), pipeline, tables, args.bootstrap, settings).summary(pipeline.name))
    return 0


def run_status_command(args) -> int:
    import json

    from state_handoff.status import format_status, pipeline_status

    pipeline, tables = _pipeline_and_tables(args)
    status = pipeline_status(tables, args.bootstrap)
    print(json.dumps(status, indent=2, default=str) if args.json else format_status(status))
    return 0


def add_pipeline_commands(commands, common) -> None:
    from jobs.generate import add_generate_command

    add_generate_command(commands, common)

    archive = commands.add_parser("archive", help="archive a topic up to a cut into Parquet day folders")
    archive.add_argument("--pipeline", required=True)
    archive.add_argument("--topic", required=True)
    cut = archive.add_mutually_exclusive_group(required=True)
    cut.add_argument("--fraction", type=float, help="archive this share of each partition (0..1)")
    cut.add_argument("--until-offsets", help='JSON of partition to exclusive end offset, e.g. {"0": 1200}')
    common(archive)
    archive.set_defaults(handler=run_archive_command)

    backfill = commands.add_parser("backfill", help="sort-based aggregation of archived days into Delta state")
    backfill.add_argument("--pipeline", required=True)
    backfill.add_argument("--from", dest="from_day", metavar="DATE", help="first day (default: first archived)")
    backfill.add_argument("--to", dest="to_day", metavar="DATE", help="last day, inclusive (default: last archived)")
    backfill.add_argument("--skip-bad-files", action="store_true",
                          help="skip unreadable Parquet files (recorded in the handoff log) instead of stopping")
    backfill.add_argument("--aggregation", choices=["sort", "hash"], default="sort",
                          help="sort-based (default, FLIP-140) or Spark's hash aggregation")
    common(backfill)
    backfill.set_defaults(handler=run_backfill_command)

    handoff = commands.add_parser("handoff", help="commit the switch: start offsets, backlog watermark, state version")
    handoff.add_argument("--pipeline", required=True)
    common(handoff)
    handoff.set_defaults(handler=run_handoff_command)

    stream = commands.add_parser("stream", help="Structured Streaming from the handoff, seeded once from the state")
    stream.add_argument("--pipeline", required=True)
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
    common(stream)
    stream.set_defaults(handler=run_stream_command)

    status = commands.add_parser("status", help="phase, handoff, offsets, watermarks, lag, rates, counts")
    status.add_argument("--pipeline", required=True)
    status.add_argument("--json", action="store_true")
    common(status)
    status.set_defaults(handler=run_status_command)
