"""The `switchyard` commands that run a pipeline's phases (pipelines, archive, backfill, rebase, handoff, stream,
status, config): their flags, one builder per command, each handing its arguments to a handler in
jobs/cli/pipeline.py."""

from __future__ import annotations

from switchyard.jobs.cli.pipeline import (ACCEPT_HELP, pipeline_option, run_archive_command, run_backfill_command,
                                        run_config_command, run_handoff_command, run_pipelines_command,
                                        run_rebase_command, run_status_command, run_stream_command)



def add_pipeline_commands(commands, common, spark_conf_option) -> None:
    for add in BUILDERS:
        add(commands, common, spark_conf_option)


def _add_pipelines(commands, common, spark_conf_option) -> None:
    pipelines = commands.add_parser("pipelines", help="the registered pipelines: name, key, windows, where declared")
    pipelines.set_defaults(handler=run_pipelines_command)


def _add_archive(commands, common, spark_conf_option) -> None:
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


def _add_backfill(commands, common, spark_conf_option) -> None:
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


def _add_rebase(commands, common, spark_conf_option) -> None:
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


def _add_handoff(commands, common, spark_conf_option) -> None:
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


def _add_stream(commands, common, spark_conf_option) -> None:
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


def _add_status(commands, common, spark_conf_option) -> None:
    status = commands.add_parser("status", help="phase, handoff, offsets, watermarks, lag, rates, counts")
    pipeline_option(status)
    status.add_argument("--json", action="store_true")
    common(status)
    status.set_defaults(handler=run_status_command)


def _add_config(commands, common, spark_conf_option) -> None:
    config = commands.add_parser("config", help="every SWITCHYARD_* setting: the value in effect and where it came "
                                                "from")
    config.add_argument("--pipeline", help="also the settings recorded with this pipeline, which every process of "
                                           "it shares (SWITCHYARD_MAX_RECORD_BYTES)")
    config.add_argument("--record", metavar="NAME=VALUE",
                        help="with --pipeline: record VALUE as the pipeline's NAME (only before it has classified "
                             "records: nothing archived, backfilled or handed off yet)")
    common(config)
    config.set_defaults(handler=run_config_command)


BUILDERS = (_add_pipelines, _add_archive, _add_backfill, _add_rebase, _add_handoff, _add_stream, _add_status, _add_config)
