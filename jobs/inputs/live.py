"""The live producer (`switchyard dev live`): events stamped with the current time at a steady rate, until stopped
(SIGTERM or Ctrl-C) or for a set time: the input of a live pipeline, for the demo and for watching the stream.

The records have `generate`'s shape and key space (`key-000000`.. Zipf-skewed, the same kinds), so they land
on the keys a generated backlog has built up; event ids carry the producer's start so that two runs never
share one.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import random
import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime

from switchyard.jobs.inputs.encoding import event_time_text, event_value
from switchyard.jobs.inputs.generate import KIND_WEIGHTS, KINDS, ZIPF_EXPONENT
from switchyard.state_handoff.errors import UserError

logger = logging.getLogger(__name__)


def live_records(keys: int, seed: int, clock=time.time) -> Iterator[tuple[bytes, bytes]]:
    """(key, value) pairs without end, each stamped with the time it is taken (pace them with kafka_io.paced)."""
    rng = random.Random(seed)
    cdf = list(itertools.accumulate(1.0 / (k + 1) ** ZIPF_EXPONENT for k in range(keys)))
    kind_cdf = list(itertools.accumulate(KIND_WEIGHTS))
    run = f"live{int(clock())}"
    for i in itertools.count():
        rank = min(bisect.bisect_right(cdf, rng.random() * cdf[-1]), keys - 1)
        key = f"key-{rank:06d}"
        kind = KINDS[min(bisect.bisect_right(kind_cdf, rng.random() * kind_cdf[-1]), len(KINDS) - 1)]
        at = event_time_text(datetime.fromtimestamp(clock(), UTC))
        amount = rng.randint(-10_000, 100_000) / 100
        yield key.encode(), event_value(f"{run}-{i}", key, at, amount, kind)


def run_live(bootstrap: str, topic: str, rate: float, keys: int, seed: int, seconds: float | None,
             out=logger.info) -> int:
    """Produce until SIGTERM/SIGINT or `seconds`; every record acknowledged (acks=all); returns how many."""
    from switchyard.state_handoff.io.kafka_io import paced, partitions_of, produce

    if rate <= 0 or keys < 1:
        raise UserError("--rate must be above 0 and --keys at least 1")
    partitions_of(bootstrap, topic)  # a missing topic is one line, before anything is sent
    stop: list[str] = []
    previous = {sig: signal.signal(sig, lambda s, _f: stop.append(signal.Signals(s).name))
                for sig in (signal.SIGTERM, signal.SIGINT)}
    started = time.monotonic()
    out(f"live: {rate:g} events/s stamped with the current time to {topic}"
        + (f" for {seconds:g}s" if seconds is not None else " until stopped (SIGTERM or Ctrl-C)"))

    def progress(sent: int) -> None:
        out(f"live: {sent:,} events sent in {time.monotonic() - started:.0f}s")

    try:
        sent = produce(bootstrap, topic, paced(live_records(keys, seed), rate, lambda: bool(stop), seconds),
                       on_progress=progress, progress_every=max(1, int(rate * 30)))
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    out(f"live: stopped{' on ' + stop[0] if stop else ''}; {sent:,} events sent and acknowledged in "
        f"{time.monotonic() - started:.0f}s")
    return sent
