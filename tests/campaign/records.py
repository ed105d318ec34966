"""The records a history produces: normal ones on an event clock that moves forward, late ones (hours behind it),
out-of-order ones (around it), malformed ones, hostile ones (instants outside the accepted range, extreme numbers,
odd keys and bytes) and bursts. Which are well-formed, dead-lettered or late is the oracle's business, not this
module's: the oracle reads back what Kafka holds."""

from __future__ import annotations

import json
import random
from datetime import datetime, timedelta

START = datetime(2026, 3, 1)
KEYS = 24

MALFORMED = [
    None,
    b"{not json",
    b"[1, 2, 3]",
    b'{"key": "", "event_time": "2026-03-01T00:00:00Z", "amount": 1}',
    b'{"key": "k-x", "event_time": "2026-03-01T00:00:00Z", "amount": "7"}',
    b'{"key": "k-x", "event_time": "yesterday", "amount": 7}',
    b'{"key": "k-x", "event_time": "2026-03-01T00:00:00Z"}',
    b'{"key": "k-x", "event_time": "2026-02-30T00:00:00Z", "amount": 1}',
    b'{"key": "k-x", "event_time": "2026-03-01T00:00:00Z", "amount": true}',
]


def _hostile(clock: datetime, i: int) -> bytes:
    at = clock.strftime("%Y-%m-%dT%H:%M:%S")
    return [
        b'{"key": "edge", "event_time": "9999-12-31T23:30:00-01:00", "amount": 1}',
        b'{"key": "edge", "event_time": "0001-01-01T00:30:00+01:00", "amount": 2}',
        b'{"key": "edge", "event_time": "0002-01-01T00:00:00Z", "amount": 3}',
        f'{{"key": "big", "event_time": "{at}Z", "amount": 1e308}}'.encode(),
        f'{{"key": "big", "event_time": "{at}Z", "amount": 1e309}}'.encode(),
        f'{{"key": "neg", "event_time": "{at}Z", "amount": -0.0, "event_id": 17}}'.encode(),
        f'{{"key": "\\u043a\\u043b\\u044e\\u0447-\\u2713", "event_time": "{at}+14:00", "amount": 5}}'.encode(),
        f'{{"key": "{"x" * 900}", "event_time": "{at}.123456-12:00", "amount": 6}}'.encode(),
        f'{{"key": 7, "event_time": "{at}Z", "amount": 7}}'.encode(),  # an object key is a documented gap
        f'{{"key": "bytes", "event_time": "{at}Z", "amount": 8, "note": "'.encode() + b"\xff\xfe" + b'"}',
        f'{{"key": "dup", "event_time": "{at}Z", "amount": 9, "event_id": "same"}}'.encode(),
        f'{{"key": "dup", "event_time": "{at}Z", "amount": 9, "event_id": "same"}}'.encode(),
        b'{"key": "leap", "event_time": "2028-02-29T23:59:59.999999Z", "amount": 10}',
        f'{{"key": " ", "event_time": "{at}Z", "amount": 11}}'.encode(),
    ][i % 14]


class Producer:
    """The records of each produce step, from its seed and the history's event clock."""

    def __init__(self):
        self.clock = START

    def records(self, kind: str, count: int, seed: int, partitions: int) -> list[tuple]:
        rng = random.Random(seed)
        out = []
        for i in range(count):
            key = f"key-{rng.randrange(KEYS):03d}"
            if kind in ("normal", "burst"):
                self.clock += timedelta(seconds=rng.randint(20, 90))
                when = self.clock
            elif kind == "late":
                when = self.clock - timedelta(hours=rng.uniform(2, 30))
            elif kind == "out_of_order":
                when = self.clock + timedelta(minutes=rng.uniform(-25, 5))
            else:
                when = self.clock
            if kind == "malformed":
                value = MALFORMED[rng.randrange(len(MALFORMED))]
            elif kind == "hostile":
                value = _hostile(self.clock, rng.randrange(14))
            else:
                value = json.dumps({"event_id": f"e-{seed}-{i}", "key": key,
                                    "event_time": when.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                                    "amount": round(rng.uniform(-100, 500), 2)}).encode()
            out.append((key.encode(), value, rng.randrange(partitions), None))
        return out
