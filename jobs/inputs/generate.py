"""Realistic, reproducible demo events for the `demo` pipeline, produced to Kafka (`switchyard dev generate`).

The events follow the demo contract of DESIGN.md: JSON values
`{"event_id", "key", "event_time", "amount", "kind"}` with the Kafka key = `key` (UTF-8). On top of the
happy path they carry what a real history has: Zipf-skewed key popularity, a few keys with awkward
characters, event times out of order by up to 5 minutes (below the 10-minute allowed lateness),
duplicate event_ids, extreme amounts, and a share of malformed records of every kind in
MALFORMED_KINDS (each one malformed under the DESIGN.md rules).

`generate_records` is pure and deterministic: the same arguments give byte-identical records.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, TextIO

import numpy as np

from switchyard.jobs.inputs.encoding import event_values, json_string
from switchyard.state_handoff.errors import UserError

logger = logging.getLogger(__name__)


class GeneratedRecord(NamedTuple):
    partition: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)

#: Every way a record is malformed, cycled through in order over the malformed positions.
MALFORMED_KINDS = (
    "tombstone",               # value None, Kafka key present
    "not_json",                # b"not json {"
    "invalid_utf8",            # bytes that are neither UTF-8 nor JSON
    "json_array",              # a JSON array (holding an otherwise good event)
    "json_string",             # a JSON scalar: string
    "json_number",             # a JSON scalar: number
    "json_null",               # a JSON scalar: null
    "missing_key",
    "empty_key",               # "key": ""
    "null_key",                # "key": null
    "missing_event_time",
    "unparseable_event_time",  # "yesterday"
    "impossible_event_time",   # "2026-02-30T00:00:00Z"
    "missing_amount",
    "string_amount",           # "12.5" as a JSON string
    "nan_amount",              # bare NaN token
    "overflow_amount",         # 1e999: parses to infinity
    "infinity_amount",         # bare -Infinity token
    "boolean_amount",          # true
)

#: Malformed kinds whose JSON still carries a usable key, so the record keeps it as its Kafka key.
_KEYED_MALFORMED = frozenset({
    "tombstone", "missing_event_time", "unparseable_event_time", "impossible_event_time",
    "missing_amount", "string_amount", "nan_amount", "overflow_amount", "infinity_amount", "boolean_amount",
})

#: Keys that must survive end to end: unicode (2-, 3- and 4-byte UTF-8), quotes, commas, tabs,
#: spaces, backslashes.
SPECIAL_KEYS = (
    "ключ-ü-日本",
    "emoji-🔑-key",
    'quote"key',
    "comma,key",
    "tab\tkey",
    "space key",
    "back\\slash",
    'all "of",\tthe \\ above ü',
)

KINDS = ("purchase", "refund", "view", "add_to_cart", "checkout", "signup")
KIND_WEIGHTS = (0.30, 0.05, 0.40, 0.15, 0.07, 0.03)

ZIPF_EXPONENT = 1.1
SPECIAL_KEY_SHARE = 0.01
DUPLICATE_SHARE = 0.001
HUGE_AMOUNT_SHARE = 0.0005
MAX_JITTER_US = 5 * 60 * 1_000_000  # out-of-order disorder: at most 5 minutes, below the 10-minute lateness

_CHUNK = 1 << 16
_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")


def malformed_count(events: int, malformed_rate: float) -> int:
    """How many of `events` records `generate_records` makes malformed (exactly)."""
    return min(events, int(round(events * malformed_rate)))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A bijection on uint64 (splitmix64's finalizer): distinct inputs give distinct, random-looking ids."""
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    return x


def _event_ids(positions: np.ndarray, salt: np.uint64) -> list[str]:
    with np.errstate(over="ignore"):
        ids = _splitmix64(positions.astype(np.uint64) + salt)
    return [f"{x:016x}" for x in ids.tolist()]


def _malformed_value(kind: str, eid: str, key_json: str, ts: str, amt: str, kind_json: str) -> bytes | None:
    """The value bytes of a malformed record of `kind`, built around the event it replaces."""
    head = f'{{"event_id":{json_string(eid)}'
    tail = f'"kind":{kind_json}}}'
    key, time_, amount = f'"key":{key_json}', f'"event_time":"{ts}"', f'"amount":{amt}'
    if kind == "tombstone":
        return None
    if kind == "not_json":
        return b"not json {"
    if kind == "invalid_utf8":
        return b"\xff\xfe\x00garbage"
    if kind == "json_array":
        return f"[{head},{key},{time_},{amount},{tail}]".encode()
    if kind == "json_string":
        return b'"just a string"'
    if kind == "json_number":
        return b"42"
    if kind == "json_null":
        return b"null"
    fields = {
        "missing_key": [time_, amount],
        "empty_key": ['"key":""', time_, amount],
        "null_key": ['"key":null', time_, amount],
        "missing_event_time": [key, amount],
        "unparseable_event_time": [key, '"event_time":"yesterday"', amount],
        "impossible_event_time": [key, '"event_time":"2026-02-30T00:00:00Z"', amount],
        "missing_amount": [key, time_],
        "string_amount": [key, time_, '"amount":"12.5"'],
        "nan_amount": [key, time_, '"amount":NaN'],
        "overflow_amount": [key, time_, '"amount":1e999'],
        "infinity_amount": [key, time_, '"amount":-Infinity'],
        "boolean_amount": [key, time_, '"amount":true'],
    }[kind]
    return ",".join([head, *fields, tail]).encode()


def generate_records(*, events: int, keys: int, partitions: int, days: int, seed: int,
                     malformed_rate: float, start: datetime = DEFAULT_START) -> Iterator[GeneratedRecord]:
    """Yield `events` demo records in production order; same arguments => byte-identical output."""
    for key, value, partition, timestamp_ms in _records(events=events, keys=keys, partitions=partitions, days=days,
                                                        seed=seed, malformed_rate=malformed_rate, start=start):
        yield GeneratedRecord(partition, key, value, timestamp_ms)


def _amounts(rng, size: int) -> list[str]:
    """Amounts: cents in [-100.00, 1000.00], rarely huge (the draws in a fixed order, for reproducibility)."""
    amounts = [repr(a) for a in (rng.integers(-10_000, 100_000, size=size, endpoint=True) / 100).tolist()]
    huge = np.flatnonzero(rng.random(size) < HUGE_AMOUNT_SHARE)
    huge_pick = rng.integers(0, 5, size=huge.size)
    huge_int = rng.integers(0, 10**18, size=huge.size, endpoint=True)
    for j, pick, big in zip(huge.tolist(), huge_pick.tolist(), huge_int.tolist()):
        amounts[j] = ("1e15", "-1e15", "1000000000000000000", "-999999999999999999", str(big))[pick]
    return amounts


def _event_ids_with_duplicates(rng, pos, salt, bad_kind: dict) -> list:
    """Event ids: unique per position, except ~0.1% that reuse an earlier well-formed event's id."""
    ids = _event_ids(pos, salt)
    size, lo = len(pos), int(pos[0])
    dup_draw = rng.random(size)
    dup_src = rng.random(size)
    for j in np.flatnonzero(dup_draw < DUPLICATE_SHARE).tolist():
        i = lo + j
        if i in bad_kind or i == 0:
            continue
        src = int(dup_src[j] * i)
        while src >= 0 and src in bad_kind:
            src -= 1
        if src >= 0:
            ids[j] = _event_ids(np.array([src]), salt)[0]
    return ids


def _records(*, events: int, keys: int, partitions: int, days: int, seed: int, malformed_rate: float,
             start: datetime) -> Iterator[tuple]:
    """generate_records as (key, value, partition, timestamp_ms), the producer's order, built a chunk at a
    time: one comprehension formats a chunk's well-formed values, then its few malformed ones are replaced."""
    from kafka.partitioner.default import murmur2

    rng = np.random.default_rng(seed)
    n = events
    salt = np.uint64((seed * 0x2545F4914F6CDD1D) & 0xFFFFFFFFFFFFFFFF)

    # Global, cheap decisions first (fixed draw order keeps everything reproducible).
    n_bad = malformed_count(n, malformed_rate)
    bad_positions = np.sort(rng.choice(n, size=n_bad, replace=False)) if n_bad else np.empty(0, np.int64)
    bad_kind = {int(p): MALFORMED_KINDS[i % len(MALFORMED_KINDS)] for i, p in enumerate(bad_positions.tolist())}

    weights = 1.0 / np.arange(1, keys + 1, dtype=np.float64) ** ZIPF_EXPONENT
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    kind_weights = np.array(KIND_WEIGHTS)
    kind_cdf = np.cumsum(kind_weights / kind_weights.sum())

    start_us = (start - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    span_us = days * 86_400 * 1_000_000
    step_q, step_r = divmod(span_us, n)

    n_keys = keys + len(SPECIAL_KEYS)
    key_partition = np.full(n_keys, -1, dtype=np.int64)
    key_bytes: list[bytes | None] = [None] * n_keys
    key_json: list[str | None] = [None] * n_keys
    for s, name in enumerate(SPECIAL_KEYS):
        key_bytes[keys + s] = name.encode("utf-8")
        key_json[keys + s] = json_string(name)

    kinds_json = np.array([json_string(kind) for kind in KINDS], dtype=object)

    for lo in range(0, n, _CHUNK):
        hi = min(n, lo + _CHUNK)
        size = hi - lo
        pos = np.arange(lo, hi, dtype=np.int64)

        # Keys: Zipf over `keys` ranks, plus a small share of special keys.
        key_idx = np.searchsorted(cdf, rng.random(size), side="right")
        np.minimum(key_idx, keys - 1, out=key_idx)
        special = rng.random(size) < SPECIAL_KEY_SHARE
        key_idx[special] = keys + rng.integers(0, len(SPECIAL_KEYS), size=int(special.sum()))
        for k in np.unique(key_idx).tolist():
            if key_partition[k] < 0:
                if key_bytes[k] is None:
                    name = f"key-{k:06d}"
                    key_bytes[k] = name.encode()
                    key_json[k] = json_string(name)
                key_partition[k] = (murmur2(key_bytes[k]) & 0x7FFFFFFF) % partitions

        # Event times: evenly spread and increasing, each jittered backwards by up to 5 minutes.
        base_us = start_us + pos * step_q + (pos * step_r) // n
        event_us = base_us - rng.integers(0, MAX_JITTER_US, size=size, endpoint=True)
        times = np.datetime_as_string(event_us.astype("datetime64[us]"), unit="us", timezone="UTC").tolist()
        ts_ms = (event_us // 1000).tolist()

        amounts = _amounts(rng, size)

        ev_kinds_json = kinds_json[np.searchsorted(kind_cdf, rng.random(size), side="right").clip(0, len(KINDS) - 1)]

        ids = _event_ids_with_duplicates(rng, pos, salt, bad_kind)

        kidx = key_idx.tolist()
        parts = key_partition[key_idx].tolist()
        kjson = [key_json[k] for k in kidx]
        kinds = ev_kinds_json.tolist()
        values = event_values(ids, kjson, times, amounts, kinds)
        record_keys = [key_bytes[k] for k in kidx]
        first, last = np.searchsorted(bad_positions, [lo, hi])
        for i in bad_positions[first:last].tolist():
            j, bad = i - lo, bad_kind[i]
            values[j] = _malformed_value(bad, ids[j], kjson[j], times[j], amounts[j], kinds[j])
            if bad not in _KEYED_MALFORMED:
                record_keys[j], parts[j] = None, i % partitions
        yield from zip(record_keys, values, parts, ts_ms)


def _validate(topic: str, events: int, keys: int, partitions: int, days: int, seed: int,
              malformed_rate: float) -> None:
    if not _TOPIC_NAME.fullmatch(topic or "") or topic in (".", ".."):
        raise UserError(f"--topic {topic!r} is not a valid Kafka topic name: use 1-249 of A-Z a-z 0-9 . _ -")
    for flag, value in (("--events", events), ("--keys", keys), ("--partitions", partitions), ("--days", days)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserError(f"{flag} must be at least 1 (got {value})")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise UserError(f"--seed must be a whole number at least 0 (got {seed})")
    if not (0 <= malformed_rate < 1):
        raise UserError(f"--malformed-rate must be at least 0 and below 1 (got {malformed_rate})")


def _ensure_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from switchyard.state_handoff.io.kafka_io import create_topic, partitions_of

    if create_topic(bootstrap, topic, partitions, exist_ok=True):
        return
    existing = len(partitions_of(bootstrap, topic))
    if existing != partitions:
        raise UserError(f"topic {topic} already exists with {existing} partitions, not --partitions {partitions}: "
                        f"pass --partitions {existing} or pick another --topic")


def run_generate(bootstrap: str, topic: str, *, events: int, keys: int, partitions: int, days: int, seed: int,
                 malformed_rate: float, start: datetime = DEFAULT_START, out: TextIO | None = None) -> str:
    """Create `topic` if missing, produce the demo events, its progress logged (or printed to the file `out`);
    return a summary line."""
    from switchyard.state_handoff.io.kafka_io import produce

    _validate(topic, events, keys, partitions, days, seed, malformed_rate)
    _ensure_topic(bootstrap, topic, partitions)
    started = time.monotonic()

    def progress(sent: int) -> None:
        elapsed = max(time.monotonic() - started, 1e-9)
        line = f"generate: {sent:,} of {events:,} events ({100 * sent / events:.1f}%), {sent / elapsed:,.0f} events/s"
        if out is None:
            logger.info(line)
        else:
            print(line, file=out, flush=True)

    records = _records(events=events, keys=keys, partitions=partitions, days=days, seed=seed,
                       malformed_rate=malformed_rate, start=start)
    sent = produce(bootstrap, topic, records, on_progress=progress, progress_every=100_000)
    if sent % 100_000:
        progress(sent)
    seconds = max(time.monotonic() - started, 1e-9)
    return (f"generate: produced {sent} events ({malformed_count(events, malformed_rate)} malformed) to {topic} "
            f"over {partitions} partitions in {seconds:.1f} s ({sent / seconds:.0f} events/s)")
