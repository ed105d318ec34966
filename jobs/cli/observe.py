"""`switchyard metrics`: the pipelines' Prometheus metrics over HTTP, until SIGTERM or Ctrl-C (jobs/metrics.py)."""

from __future__ import annotations

from switchyard.state_handoff import settings as switchyard_settings

DEFAULT_PORT = 9464


def add_metrics_command(commands, common) -> None:
    default = switchyard_settings.value("SWITCHYARD_PIPELINE")
    metrics = commands.add_parser("metrics", help="serve the pipelines' Prometheus metrics over HTTP (phase, lag, "
                                                  "rates, counts, lease, the archive's margin over Kafka's retention)")
    metrics.add_argument("--pipeline", dest="pipelines", action="append", default=None, required=default is None,
                         help="a pipeline to report (repeatable; env SWITCHYARD_PIPELINE" +
                              (f", now {default})" if default else ")"))
    metrics.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help=f"HTTP port (default {DEFAULT_PORT}; 0: any free one, printed)")
    metrics.add_argument("--address", default="127.0.0.1",
                         help="address to bind (default 127.0.0.1; 0.0.0.0 for a scraper on another host)")
    metrics.add_argument("--for", dest="for_seconds", type=float, metavar="SECONDS",
                         help="stop after SECONDS (default: until SIGTERM or Ctrl-C)")
    common(metrics)
    metrics.set_defaults(handler=run_metrics_command, default_pipeline=default)


def run_metrics_command(args) -> int:
    import signal
    import threading

    from switchyard.jobs.cli.pipeline import check_warehouse
    from switchyard.jobs.metrics import check_port, served
    from switchyard.state_handoff.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    port = check_port(args.port, "--port")
    check_warehouse(args.warehouse)
    names = [get_pipeline(name).name for name in (args.pipelines or [args.default_pipeline])]
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    with served([Tables(args.warehouse, name) for name in names], args.bootstrap, port, args.address,
                f"switchyard metrics ({', '.join(names)})"):
        done.wait(args.for_seconds)
    return 0
