"""`switchyard serve` (the pipelines' streams, kept running: jobs/serve.py), `switchyard start` (a request it
obeys) and `switchyard metrics` (the pipelines' Prometheus metrics over HTTP: jobs/metrics.py)."""

from __future__ import annotations

import logging

from switchyard.jobs.cli.pipeline import check_warehouse, pipeline_and_tables, pipeline_option
from switchyard.state_handoff import settings as switchyard_settings

logger = logging.getLogger(__name__)

DEFAULT_PORT = 9464


def _pipelines_option(parser, what: str) -> None:
    default = switchyard_settings.value("SWITCHYARD_PIPELINE")
    parser.add_argument("--pipeline", dest="pipelines", action="append", default=None, required=default is None,
                        help=f"a pipeline to {what} (repeatable; env SWITCHYARD_PIPELINE" +
                             (f", now {default})" if default else ")"))
    parser.set_defaults(default_pipeline=default)


def add_service_commands(commands, common) -> None:
    serve = commands.add_parser("serve", help="run the pipelines' streams and keep them running: restarted with "
                                              "backoff when they fail, stopped and started by requests in their log")
    _pipelines_option(serve, "serve")
    serve.add_argument("--metrics-port", type=int, default=DEFAULT_PORT, metavar="PORT",
                       help=f"serve the pipelines' and the service's Prometheus metrics on PORT (default "
                            f"{DEFAULT_PORT}; 0: any free one, printed)")
    serve.add_argument("--metrics-address", default="127.0.0.1", help="the metrics' address (default 127.0.0.1)")
    serve.add_argument("--restarts", type=int, default=5, metavar="N",
                       help="a stream that fails N times within --restart-window stays down (default 5)")
    serve.add_argument("--restart-window", type=float, default=600.0, metavar="SECONDS", help="(default 600)")
    serve.add_argument("--stream-arg", dest="stream_args", action="append", default=[], metavar="ARG",
                       help="an argument for every `switchyard stream` it runs (repeatable), e.g. "
                            "--stream-arg=--tables-trigger-seconds --stream-arg=1")
    common(serve)
    serve.set_defaults(handler=run_serve_command)

    start = commands.add_parser("start", help="ask `switchyard serve` to run again a stream that a stop request "
                                              "ended or that it holds down")
    pipeline_option(start)
    common(start)
    start.set_defaults(handler=run_start_command)

    metrics = commands.add_parser("metrics", help="serve the pipelines' Prometheus metrics over HTTP (phase, lag, "
                                                  "rates, counts, lease, the archive's margin over Kafka's retention)")
    _pipelines_option(metrics, "report")
    metrics.add_argument("--port", type=int, default=DEFAULT_PORT,
                         help=f"HTTP port (default {DEFAULT_PORT}; 0: any free one, printed)")
    metrics.add_argument("--address", default="127.0.0.1",
                         help="address to bind (default 127.0.0.1; 0.0.0.0 for a scraper on another host)")
    metrics.add_argument("--for", dest="for_seconds", type=float, metavar="SECONDS",
                         help="stop after SECONDS (default: until SIGTERM or Ctrl-C)")
    common(metrics)
    metrics.set_defaults(handler=run_metrics_command)


def _references(args) -> list[str]:
    """The pipelines as given: each a registered name or a reference `module:NAME`."""
    return args.pipelines or [args.default_pipeline]


def _tables(args):
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    check_warehouse(args.warehouse)
    names = [get_pipeline(ref).name for ref in _references(args)]
    return [Tables(args.warehouse, name) for name in names]


def _sigterm_event():
    """An event SIGTERM sets, from now on."""
    import signal
    import threading

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    return done


def _until_sigterm(seconds: float | None = None, done=None) -> None:
    """Wait until SIGTERM (`done`, when its handler was set earlier), Ctrl-C or `seconds`."""
    done = done or _sigterm_event()
    try:
        done.wait(seconds)
    except KeyboardInterrupt:
        pass


def run_metrics_command(args) -> int:
    from switchyard.jobs.metrics import check_port, served

    port = check_port(args.port, "--port")
    tables = _tables(args)
    with served(tables, args.bootstrap, port, args.address,
                f"switchyard metrics ({', '.join(t.pipeline for t in tables)})"):
        _until_sigterm(args.for_seconds)
    return 0


def run_serve_command(args) -> int:
    import threading

    stopped = _sigterm_event()  # from the command's start: a stop before the service runs is obeyed, nothing started
    from switchyard.jobs.metrics import check_port, served
    from switchyard.jobs.serve import Restarts, Service
    from switchyard.state_handoff.errors import UserError

    port = check_port(args.metrics_port, "--metrics-port")
    if args.restarts < 1 or args.restart_window <= 0:
        raise UserError("--restarts must be at least 1 and --restart-window more than 0 seconds")
    tables = _tables(args)
    service = Service(tables, args.bootstrap, args.stream_args,
                      lambda: Restarts(limit=args.restarts, window_s=args.restart_window), refs=_references(args))
    names = ", ".join(t.pipeline for t in tables)
    with served(tables, args.bootstrap, port, args.metrics_address, f"switchyard serve ({names})", also=[service]):
        if not stopped.is_set():
            worker = threading.Thread(target=service.run, name="serve")
            worker.start()
            _until_sigterm(done=stopped)
            service.stop()
            worker.join()
    logger.info(f"switchyard serve ({names}): stopped")
    return 0


def run_start_command(args) -> int:
    from switchyard.state_handoff.control.requests import request_start
    from switchyard.state_handoff.control.view import PipelineView

    _, tables = pipeline_and_tables(args)
    entry = request_start(PipelineView.read(tables))
    logger.info(f"start {tables.pipeline}: START_REQUESTED for handoff {entry.handoff_id}; `switchyard serve` runs its "
          "stream")
    return 0
