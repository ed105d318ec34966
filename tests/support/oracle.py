"""The independent oracle: plain Python over the records read back from Kafka, following DESIGN.md's rules.

It shares no code with switchyard's Spark path: its own JSON parsing, its own timestamp rule, its own
aggregation, window and watermark arithmetic.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from switchyard.state_handoff.io.kafka_security import client_kwargs

ISO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$")
WINDOW = timedelta(hours=1)
LATENESS = timedelta(minutes=10)
# The event times a pipeline accepts by default, as docs/your-own-pipeline.md states them: [0002-01-01, 9999-01-01)
# UTC; an instant outside (year 10000 and year 0 included) is dead-lettered as out_of_range_<field>.
ACCEPTED = (datetime(2, 1, 1), datetime(9999, 1, 1))
OUT_OF_RANGE = object()


def utc_instant(text: str):
    """A naive UTC instant from an ISO-8601 text with its offset; OUT_OF_RANGE when the instant lies outside ACCEPTED
    (Python's datetime cannot hold year 10000 or year 0: shifting a local time there overflows); ValueError when the
    text is no instant."""
    local = datetime.fromisoformat(text)
    try:
        instant = (local.replace(tzinfo=None) - local.utcoffset())
    except OverflowError:
        return OUT_OF_RANGE
    return instant if ACCEPTED[0] <= instant < ACCEPTED[1] else OUT_OF_RANGE


def max_record_bytes() -> int:
    """DESIGN's record size limit: SWITCHYARD_MAX_RECORD_BYTES, else 1 MiB."""
    return int(os.environ.get("SWITCHYARD_MAX_RECORD_BYTES") or 1024 * 1024)


@dataclass(frozen=True)
class KafkaRecord:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


def read_topic(bootstrap: str, topic: str) -> list[KafkaRecord]:
    """Every committed record of the topic, by a plain consumer: a transaction's aborted records and its markers are
    never input (their offsets are skipped), and the end is the last stable offset."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, **client_kwargs(), enable_auto_commit=False,
                             consumer_timeout_ms=10000, isolation_level="read_committed")
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning()
    ends = consumer.end_offsets(parts)
    records = []
    remaining = {tp.partition: ends[tp] for tp in parts}
    while any(consumer.position(TopicPartition(topic, p)) < end for p, end in remaining.items()):
        for batch in consumer.poll(timeout_ms=2000).values():
            records += [KafkaRecord(m.partition, m.offset, m.key, m.value) for m in batch]
    consumer.close()
    return sorted(records, key=lambda r: (r.partition, r.offset))


@dataclass(frozen=True)
class Event:
    key: str
    event_id: str | None
    event_time: datetime  # naive UTC
    amount: float
    kind: str | None = None


def by_key(event: Event):
    """The demo's key of an event; a pipeline keyed otherwise passes its own (`key_of`), e.g. (key, kind)."""
    return event.key


def json_object(value: bytes | None) -> tuple[str | None, dict | None]:
    """(reason, None) for a value that is no JSON object (or is not parsed), (None, the object) otherwise."""
    if value is None:
        return "tombstone", None
    if len(value) > max_record_bytes():  # not parsed, well-formed or not
        return "too_large", None
    try:
        obj = json.loads(value.decode("utf-8", errors="replace"))
    except ValueError:
        return "not_json_object", None
    if not isinstance(obj, dict):
        return "not_json_object", None
    return None, obj


def classify(value: bytes | None) -> tuple[str | None, Event | None]:
    """(reason, None) for a malformed value, (None, event) for a well-formed one."""
    reason, obj = json_object(value)
    if reason:
        return reason, None
    key = obj.get("key")
    if key is not None and not isinstance(key, str):
        key = json.dumps(key)
    if key is None or key == "":
        return "missing_key", None
    when = obj.get("event_time")
    try:
        if not isinstance(when, str) or not ISO.match(when):
            raise ValueError(when)
        event_time = utc_instant(when)
    except ValueError:
        return "bad_event_time", None
    if event_time is OUT_OF_RANGE:
        return "out_of_range_event_time", None
    amount = obj.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        return "bad_amount", None
    try:
        amount = float(amount)
    except OverflowError:
        return "bad_amount", None
    if not math.isfinite(amount):
        return "bad_amount", None
    event_id = obj.get("event_id")
    kind = obj.get("kind")
    return None, Event(key, event_id if event_id is None or isinstance(event_id, str) else json.dumps(event_id),
                       event_time, amount, kind if isinstance(kind, str) else None)


def window_start(t: datetime, size: timedelta = WINDOW) -> datetime:
    """The start of the tumbling window of `size` that `t` lies in (sizes divide a day: counted from midnight)."""
    midnight = t.replace(hour=0, minute=0, second=0, microsecond=0)
    return midnight + ((t - midnight) // size) * size


@dataclass
class KeyState:
    event_count: int = 0
    amount_sum: float = 0.0
    amount_abs: float = 0.0  # for the tolerance of floating-point sums summed in another order
    amount_min: float = math.inf
    amount_max: float = -math.inf
    last: tuple = ()

    def add(self, e: Event) -> None:
        self.event_count += 1
        self.amount_sum += e.amount
        self.amount_abs += abs(e.amount)
        self.amount_min = min(self.amount_min, e.amount)
        self.amount_max = max(self.amount_max, e.amount)
        order = (e.event_time, (0, "") if e.event_id is None else (1, e.event_id), e.event_time, e.amount)
        self.last = max(self.last, order) if self.last else order


@dataclass
class WindowState:
    event_count: int = 0
    amount_sum: float = 0.0
    amount_abs: float = 0.0
    amount_max: float = -math.inf

    def add(self, e: Event) -> None:
        self.event_count += 1
        self.amount_sum += e.amount
        self.amount_abs += abs(e.amount)
        self.amount_max = max(self.amount_max, e.amount)


@dataclass
class Expected:
    state: dict[str, KeyState] = field(default_factory=lambda: defaultdict(KeyState))
    windows: dict[tuple[str, datetime], WindowState] = field(default_factory=lambda: defaultdict(WindowState))
    dead_letter: dict[tuple[int, int], str] = field(default_factory=dict)
    late: set[tuple[int, int]] = field(default_factory=set)
    read: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    well_formed: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    newest: datetime | None = None
    window: timedelta = WINDOW
    lateness: timedelta = LATENESS

    @property
    def backlog_watermark(self) -> datetime | None:
        return None if self.newest is None else self.newest - self.lateness

    def final_windows(self, watermark: datetime | None = None) -> dict:
        wm = watermark or self.backlog_watermark
        return {k: w for k, w in self.windows.items() if k[1] + self.window <= wm}

    def open_windows(self, watermark: datetime | None = None) -> dict:
        wm = watermark or self.backlog_watermark
        return {k: w for k, w in self.windows.items() if k[1] + self.window > wm}


def kind_required(value: bytes | None) -> tuple[str | None, Event | None]:
    """`classify` for the demo with its `kind` made a required field: an event without a kind is malformed."""
    reason, event = classify(value)
    if event is not None and event.kind is None:
        return "missing_kind", None
    return reason, event


def backlog(records: list[KafkaRecord], window: timedelta = WINDOW, lateness: timedelta = LATENESS,
            key_of=by_key, classified=classify) -> Expected:
    """What the backfill of exactly these records must produce (hourly windows, 10 minutes lateness unless given;
    keyed by `key_of`; each value parsed by `classified`)."""
    expected = Expected(window=window, lateness=lateness)
    for r in records:
        expected.read[r.partition] += 1
        reason, event = classified(r.value)
        if reason:
            expected.dead_letter[(r.partition, r.offset)] = reason
            continue
        expected.well_formed[r.partition] += 1
        expected.state[key_of(event)].add(event)
        expected.windows[(key_of(event), window_start(event.event_time, window))].add(event)
        expected.newest = max(expected.newest, event.event_time) if expected.newest else event.event_time
    return expected


def window_end(t: datetime) -> datetime:
    return window_start(t) + WINDOW


@dataclass
class StreamExpected:
    """What backfill + handoff + stream must produce over all records, given the stream's batch boundaries."""

    state: dict[str, KeyState]
    windows: dict[tuple[str, datetime], WindowState]
    final_watermark: datetime
    late: set[tuple[int, int]]
    dead_letter: dict[tuple[int, int], str]
    read: dict[int, int]
    well_formed: dict[int, int]
    window: timedelta = WINDOW

    def final_windows(self) -> dict:
        return {k: w for k, w in self.windows.items() if k[1] + self.window <= self.final_watermark}

    def open_windows(self) -> dict:
        return {k: w for k, w in self.windows.items() if k[1] + self.window > self.final_watermark}


def through_stream(archived: list[KafkaRecord], tail: list[KafkaRecord], batches: list[dict[int, int]],
                   window: timedelta = WINDOW, lateness: timedelta = LATENESS, key_of=by_key,
                   classified=classify) -> StreamExpected:
    """`batches` gives, per stream batch in order, the last offset read from each partition it touched; a batch
    reads the partition's records after the previous batch's last offset up to its own (offsets in between that no
    committed record holds, a transaction's markers or aborted records, are skipped).

    The watermark starts at the backlog watermark and, after each batch, becomes the greatest of itself and
    (newest well-formed event time of the batch - lateness); a tail record is late when its window ended
    at or before the watermark in force when its batch began.
    """
    expected = backlog(archived, window, lateness, key_of, classified)
    state, windows = expected.state, expected.windows
    watermark = expected.backlog_watermark
    by_position = {(r.partition, r.offset): r for r in tail}
    read_to: dict[int, int] = {}
    for r in sorted(tail, key=lambda r: (r.partition, r.offset)):
        read_to.setdefault(r.partition, r.offset - 1)
    late = set()
    seen = set()
    for last_offsets in batches:
        newest = None
        for partition, last in sorted(last_offsets.items()):
            first = read_to.get(partition, -1) + 1
            for offset in range(first, last + 1):
                record = by_position.get((partition, offset))
                if record is None:  # no committed record there
                    continue
                seen.add((partition, offset))
                expected.read[partition] += 1
                reason, event = classified(record.value)
                if reason:
                    expected.dead_letter[(partition, offset)] = reason
                    continue
                expected.well_formed[partition] += 1
                state[key_of(event)].add(event)
                if window_start(event.event_time, window) + window <= watermark:
                    late.add((partition, offset))
                else:
                    windows[(key_of(event), window_start(event.event_time, window))].add(event)
                newest = max(newest, event.event_time) if newest else event.event_time
            read_to[partition] = last
        if newest is not None:
            watermark = max(watermark, newest - lateness)
    unread = set(by_position) - seen
    assert not unread, f"the stream's batches never read {sorted(unread)[:5]}..."
    return StreamExpected(state, windows, watermark, late, expected.dead_letter, expected.read, expected.well_formed,
                          window)


@dataclass
class KindState:
    """The `kinds` pipeline's aggregations of one event kind."""

    events: int = 0
    amount_sum: float = 0.0
    amount_max: float = -math.inf
    last_seen: datetime | None = None

    @property
    def amount_mean(self) -> float:
        return self.amount_sum / self.events


def _finite_number(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def by_kind(records: list[KafkaRecord]) -> tuple[dict[str, KindState], int]:
    """The `kinds` pipeline over `records` (keyed by the required string field `kind`): its state per kind, and
    how many records are malformed for it."""
    from switchyard.state_handoff.language.pipelines import get_pipeline

    fields = get_pipeline("kinds").fields  # the declaration's fields only: the parsing is this module's own
    state: dict[str, KindState] = defaultdict(KindState)
    malformed = 0
    for r in records:
        reason, event = classify_fields(r.value, fields)
        if reason:
            malformed += 1
            continue
        s = state[event["kind"]]
        s.events += 1
        s.amount_sum += event["amount"]
        s.amount_max = max(s.amount_max, event["amount"])
        s.last_seen = event["event_time"] if s.last_seen is None else max(s.last_seen, event["event_time"])
    return dict(state), malformed


def _at_path(obj, path: tuple[str, ...]):
    """The JSON value at `path`, None when an object on the way is missing or is not an object."""
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def _instant(found):
    """A naive UTC instant from a decoded timestamp, or from a string that is an ISO-8601 instant (OUT_OF_RANGE
    outside ACCEPTED); None for anything else."""
    if isinstance(found, datetime):
        instant = found.astimezone(timezone.utc).replace(tzinfo=None)
        return instant if ACCEPTED[0] <= instant < ACCEPTED[1] else OUT_OF_RANGE
    if isinstance(found, str) and ISO.match(found):
        try:
            return utc_instant(found)
        except ValueError:
            return None
    return None


def typed_fields(obj: dict, fields, text_of) -> tuple[str | None, dict | None]:
    """The fields of a decoded value at their paths, in declaration order (`text_of`: a non-null value as a string
    field's text): (the first required field's reason, None) when one is missing or invalid, else (None, values)."""
    typed = {}
    for f in fields:
        found = _at_path(obj, f.json_path)
        if f.type == "string":
            text = None if found is None else text_of(found)
            typed[f.name], bad, reason = (text or None), not text, f"missing_{f.name}"
        elif f.type == "timestamp":
            typed[f.name] = _instant(found)
            bad, reason = typed[f.name] is None, f"bad_{f.name}"
            if typed[f.name] is OUT_OF_RANGE:
                typed[f.name], bad, reason = None, True, f"out_of_range_{f.name}"
        else:
            typed[f.name] = float(found) if _finite_number(found) else None
            bad, reason = typed[f.name] is None, f"bad_{f.name}"
        if bad and f.required:
            return reason, None
    return None, typed


def classify_fields(value: bytes | None, fields) -> tuple[str | None, dict | None]:
    """Any pipeline's parse of one value, field by field at each field's path, in declaration order: (reason,
    None) for a malformed value, (None, {field: typed value}) for a well-formed one."""
    reason, obj = json_object(value)
    if reason:
        return reason, None
    return typed_fields(obj, fields, lambda v: v if isinstance(v, str) else json.dumps(v))


def classify_avro(value: bytes | None, fields, avro, writers: dict | None = None,
                  incompatible: frozenset = frozenset()) -> tuple[str | None, dict | None]:
    """Any Avro pipeline's parse of one value in Confluent's wire format, decoded by fastavro (not Spark): (reason,
    None) for a malformed value, (None, {field: typed value}) for a well-formed one. `writers`: the writer schema
    of each id the pipeline reads (parsed JSON), read into the pipeline's schema (its fixed id's alone when None);
    `incompatible`: ids of writer schemas the pipeline's cannot read."""
    import io as _io

    import fastavro

    if value is None:
        return "tombstone", None
    if len(value) > max_record_bytes():
        return "too_large", None
    if len(value) <= 5 or value[0] != 0:
        return "not_confluent_avro", None
    schema_id = int.from_bytes(value[1:5], "big")
    writers = {avro.schema_id: avro.parsed} if writers is None else writers
    if schema_id in incompatible:
        return f"incompatible_schema_id_{schema_id}", None
    if schema_id not in writers:
        return f"unknown_schema_id_{schema_id}", None
    try:
        record = fastavro.schemaless_reader(_io.BytesIO(value[5:]), fastavro.parse_schema(writers[schema_id]),
                                           fastavro.parse_schema(avro.parsed))
    except Exception:  # noqa: BLE001 - any decoding failure is the record's
        return "bad_avro", None
    if all(v is None for v in record.values()):  # nothing decoded: a body that only looks like a record
        return "bad_avro", None
    return typed_fields(record, fields, str)
