"""`switchyard dev generate` and `switchyard dev live`: the demo pipeline's input, a reproducible backlog and a
live feed."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from switchyard.jobs.inputs.generate import DEFAULT_START
from switchyard.state_handoff.errors import UserError

logger = logging.getLogger(__name__)


def add_generate_command(commands, common) -> None:
    """Register `switchyard dev generate` on the argparse sub-parsers object `commands`."""
    parser = commands.add_parser("generate",
                                 help="produce realistic demo events (with malformed ones) to a Kafka topic")
    parser.add_argument("--topic", required=True, help="Kafka topic (created if missing)")
    parser.add_argument("--events", type=int, required=True, help="how many records to produce")
    parser.add_argument("--keys", type=int, required=True, help="how many distinct regular keys (Zipf-skewed)")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of a new topic (default 4)")
    parser.add_argument("--days", type=int, default=7, help="event times spread over this many days (default 7)")
    parser.add_argument("--seed", type=int, default=42,
                        help="random seed; same flags give the same records (default 42)")
    parser.add_argument("--malformed-rate", type=float, default=0.01,
                        help="share of malformed records, 0 <= R < 1 (default 0.01)")
    parser.add_argument("--start", default=DEFAULT_START.date().isoformat(), metavar="DATE",
                        help="the first event time, YYYY-MM-DD (UTC midnight) or an ISO time with its zone; "
                             "events spread over --days from there (default %(default)s)")
    common(parser)
    parser.set_defaults(handler=run_generate_command)


def parse_start(text: str) -> datetime:
    """--start as a UTC time: a day is its UTC midnight, an ISO time without a zone is taken as UTC."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UserError(f"--start {text!r}: give a day (YYYY-MM-DD) or an ISO time (2026-01-01T09:30:00Z)") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def run_generate_command(args) -> int:
    from switchyard.jobs.inputs.generate import run_generate

    logger.info(run_generate(args.bootstrap, args.topic, events=args.events, keys=args.keys,
                             partitions=args.partitions, days=args.days, seed=args.seed,
                             malformed_rate=args.malformed_rate, start=parse_start(args.start)))
    return 0


def add_live_command(commands, common) -> None:
    """Register `switchyard dev live` on the argparse sub-parsers object `commands`."""
    parser = commands.add_parser("live", help="produce events stamped with the current time at a steady rate")
    parser.add_argument("--topic", required=True, help="an existing Kafka topic")
    parser.add_argument("--rate", type=float, default=20.0, help="events per second (default 20)")
    parser.add_argument("--keys", type=int, default=500, help="distinct keys, Zipf-skewed (default 500)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--for", dest="seconds", type=float, metavar="SECONDS",
                        help="stop after SECONDS (default: until SIGTERM or Ctrl-C)")
    common(parser)
    parser.set_defaults(handler=run_live_command)


def run_live_command(args) -> int:
    from switchyard.jobs.inputs.live import run_live

    run_live(args.bootstrap, args.topic, args.rate, args.keys, args.seed, args.seconds)
    return 0
