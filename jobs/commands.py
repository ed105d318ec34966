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
