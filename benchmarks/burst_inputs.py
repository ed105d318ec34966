"""The burst scenario's input, deterministic: the archived backlog, the steady trickle (record i the same in
every arm whenever it is sent) and the burst, all demo events whose event times never come from the clock."""

from __future__ import annotations

import itertools
import threading
import time
from datetime import datetime, timedelta, timezone

from switchyard.jobs.inputs.encoding import event_time_text, event_value
from switchyard.state_handoff.errors import UserError


# Event times: the backlog in the two hours before BASE, every streamed record (trickle and burst) inside the
# nine minutes after it, so no streamed record is ever late (the demo allows 10 minutes) however the arms batch.
BASE = datetime(2026, 1, 1, tzinfo=timezone.utc)
STREAMED_SPAN_US = 9 * 60 * 1_000_000
MALFORMED_SHARE = 0.001
ZIPF_EXPONENT = 1.1
_CHUNK = 1 << 16
_MASK = (1 << 64) - 1


# ---------------------------------------------------------------- the records (deterministic)

def _mix(x: int) -> int:
    """splitmix64's finalizer on a Python int."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _value(event_id: str, key: str, when_us: int, cents: int, kind: str) -> bytes:
    when = datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(microseconds=when_us)
    return event_value(event_id, key, event_time_text(when), cents / 100, kind)


def _base_us() -> int:
    return (BASE - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)


def backlog_record(i: int, n: int, keys: int, seed: int) -> tuple[bytes, bytes]:
    """Record i of the archived backlog: event times spread over BASE - 2h .. BASE - 20min."""
    h = _mix(i ^ (seed << 40) ^ 0x5EED)
    key = f"key-{h % keys:06d}"
    when = _base_us() - 2 * 3600 * 1_000_000 + i * (100 * 60 * 1_000_000 // max(n, 1))
    return key.encode(), _value(f"s{seed}-{i}", key, when, (h >> 24) % 110_001 - 10_000, "backlog")


def trickle_record(i: int, keys: int, seed: int) -> tuple[bytes, bytes]:
    """Record i of the steady input: the same in every arm, whenever it is sent."""
    h = _mix(i ^ (seed << 40) ^ 0x7121C)
    key = f"key-{h % keys:06d}"
    when = _base_us() + (h >> 20) % STREAMED_SPAN_US
    return key.encode(), _value(f"t{seed}-{i}", key, when, (h >> 8) % 110_001 - 10_000, "trickle")


def burst_records(n: int, keys: int, seed: int):
    """The burst: `n` records, Zipf-skewed keys, a 0.1% share malformed; same arguments, same bytes."""
    import numpy as np

    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    base_us = _base_us()
    for lo in range(0, n, _CHUNK):
        size = min(n, lo + _CHUNK) - lo
        key_idx = np.minimum(np.searchsorted(cdf, rng.random(size), side="right"), keys - 1).tolist()
        when = (base_us + rng.integers(0, STREAMED_SPAN_US, size=size)).astype("datetime64[us]")
        times = np.datetime_as_string(when, unit="us", timezone="UTC").tolist()
        amounts = (rng.integers(-10_000, 100_000, size=size, endpoint=True) / 100).tolist()
        bad = (rng.random(size) < MALFORMED_SHARE).tolist()
        for j in range(size):
            key = f"key-{key_idx[j]:06d}"
            if bad[j]:
                yield key.encode(), b"not json {"
            else:
                yield key.encode(), event_value(f"b{seed}-{lo + j}", key, times[j], amounts[j], "burst")


class Trickle(threading.Thread):
    """Sends trickle_record(0), (1), ... at `rate` per second until `stop_at` records (when set) or halt()."""

    def __init__(self, bootstrap: str, topic: str, rate: int, keys: int, seed: int, stop_at: int | None = None):
        super().__init__(daemon=True, name=f"trickle-{topic}")
        self.bootstrap, self.topic, self.rate, self.keys, self.seed = bootstrap, topic, rate, keys, seed
        self.stop_at = stop_at
        self.sent = 0
        self.failures: list = []
        self.finished_at: float | None = None
        self._halt = threading.Event()

    def halt(self) -> None:
        self._halt.set()

    def run(self) -> None:
        from switchyard.state_handoff.io.kafka_io import paced, produce

        def records():
            for n in itertools.count():
                if self.stop_at is not None and n >= self.stop_at:
                    return
                self.sent = n + 1  # handed to the producer, which sends it at once
                yield trickle_record(n, self.keys, self.seed)

        try:
            produce(self.bootstrap, self.topic, paced(records(), self.rate, self._halt.is_set), linger_ms=5)
        except (RuntimeError, UserError) as err:  # records not acknowledged, or the broker gone: the burst reports them
            self.failures.append(err)
        finally:
            self.finished_at = time.time()
