"""A pipeline declared once for both phases: key, event time, mergeable aggregations, optional windows."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Literal

AggregationKind = Literal["count", "sum", "min", "max", "mean", "variance", "stddev", "first", "last",
                          "approx_distinct"]
KINDS = ("count", "sum", "min", "max", "mean", "variance", "stddev", "first", "last", "approx_distinct")


@dataclass(frozen=True)
class Aggregation:
    """One output column. `last` takes `column` from the event with the greatest (event_time, event_id), `first`
    from the event with the smallest."""

    name: str
    kind: AggregationKind
    column: str | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"aggregation {self.name}: kind must be one of {', '.join(KINDS)}, not {self.kind!r}")
        if self.kind != "count" and not self.column:
            raise ValueError(f"aggregation {self.name}: kind {self.kind} needs a column")


def count(name: str) -> Aggregation:
    return Aggregation(name, "count")


def total(name: str, column: str) -> Aggregation:
    return Aggregation(name, "sum", column)


def minimum(name: str, column: str) -> Aggregation:
    return Aggregation(name, "min", column)


def maximum(name: str, column: str) -> Aggregation:
    return Aggregation(name, "max", column)


def mean(name: str, column: str) -> Aggregation:
    return Aggregation(name, "mean", column)


def variance(name: str, column: str) -> Aggregation:
    """The sample variance of `column` (null below two values)."""
    return Aggregation(name, "variance", column)


def stddev(name: str, column: str) -> Aggregation:
    """The sample standard deviation of `column` (null below two values)."""
    return Aggregation(name, "stddev", column)


def first(name: str, column: str) -> Aggregation:
    return Aggregation(name, "first", column)


def last(name: str, column: str) -> Aggregation:
    return Aggregation(name, "last", column)


def approx_distinct(name: str, column: str) -> Aggregation:
    """How many distinct values of `column` (NULLs not counted), as an HLL sketch (Apache DataSketches, lgConfigK
    12: a relative standard error of 1.6%, exact below a few hundred values) that tiles, state and windows union;
    values are hashed as their string form."""
    return Aggregation(name, "approx_distinct", column)


@dataclass(frozen=True)
class TumblingWindows:
    """Tumbling event-time windows per key; `size` must divide a day so that a window lies in one day tile."""

    size: timedelta
    allowed_lateness: timedelta
    aggregations: tuple[Aggregation, ...]

    def __post_init__(self):
        if self.size <= timedelta(0) or timedelta(days=1) % self.size:
            raise ValueError(f"window size {self.size} must be positive and divide one day")

    @property
    def slide(self) -> timedelta:
        """How far apart windows start: a tumbling window's size."""
        return self.size

    @property
    def per_record(self) -> int:
        """How many windows each record falls in."""
        return self.size // self.slide


@dataclass(frozen=True)
class HoppingWindows(TumblingWindows):
    """Hopping (sliding) event-time windows per key: each `size` long, one starting at every multiple of `every`,
    so a record falls in size / every of them. `every` must divide `size` and one day; `size` must be at most a
    day. Tiles hold one `every`-long pane each, and a window merges its panes."""

    every: timedelta = timedelta(0)

    def __post_init__(self):
        slide = self.every
        if slide <= timedelta(0) or timedelta(days=1) % slide or self.size % slide or self.size <= timedelta(0) \
                or self.size > timedelta(days=1):
            raise ValueError(f"hopping windows of {self.size} every {slide}: `every` must be positive and divide "
                             "both the size and one day, and the size be at most a day")

    @property
    def slide(self) -> timedelta:
        return self.every


#: Columns every record carries beside its fields (the raw Kafka record, its archive day, the parser's verdict). A
#: field of one of these names would replace the column: its raw bytes, for `value`, lost from the archive and the
#: dead letters.
RECORD_COLUMNS = ("value", "kafka_partition", "kafka_offset", "kafka_timestamp", "kafka_key", "event_date", "error")


_SEGMENT = re.compile(r"^[^.`'\"\[\]]+$")


@dataclass(frozen=True)
class Field:
    """A field of the JSON event value. `required` fields make a record malformed when absent or invalid.

    `path` addresses it inside the value, dot-separated from the top (`payload.user.id`); by default the top-level
    key `name`. An object on the way that is missing, null or not an object leaves the field missing."""

    name: str
    type: Literal["string", "timestamp", "number"]
    required: bool = True
    path: str | None = None

    def __post_init__(self):
        if not all(_SEGMENT.match(part) for part in self.json_path):
            raise ValueError(f"field {self.name}: path {self.path!r} must be keys joined by dots, none empty or "
                             "holding a quote, a backtick or a bracket")

    @property
    def json_path(self) -> tuple[str, ...]:
        """The keys from the top of the JSON object down to the field."""
        return tuple((self.path if self.path is not None else self.name).split("."))


AVRO_TIMESTAMPS = ("timestamp-millis", "timestamp-micros")


@dataclass(frozen=True)
class AvroFormat:
    """Record values in Confluent's wire format: a zero magic byte, the writer schema's registry id (4 bytes,
    big-endian), then the Avro binary encoding of one record of that schema.

    Either one fixed writer schema: `schema` is its `.avsc` file, declared beside the pipeline, and `schema_id` the
    id its records carry. Or writer schemas by id from a schema registry (SWITCHYARD_SCHEMA_REGISTRY_URL): `subject`
    names the registry's subject whose versions the records are written with (Confluent's default for a topic's
    values: `<topic>-value`), and `schema` is the reader schema every version is read into (Avro's schema
    resolution: a field the writer lacks takes its default). A field's `path` names record fields of `schema` (a
    union with null reads as its other branch); a `timestamp` field is an Avro `timestamp-millis` or
    `timestamp-micros` long, or a string read as an ISO-8601 instant."""

    schema: str | Path
    schema_id: int | None = None
    subject: str | None = None
    # read once, as the pipeline is declared: the schema's text (for from_avro) and its parse
    schema_json: str = field(init=False, repr=False, compare=False)
    parsed: dict = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        if (self.schema_id is None) == (self.subject is None):
            raise ValueError(f"Avro schema {self.schema}: give either schema_id (one fixed writer schema) or subject "
                             "(writer schemas by id from the schema registry), not both or neither")
        if self.schema_id is not None and not 0 <= self.schema_id < 2 ** 31:
            raise ValueError(f"Avro schema id {self.schema_id} must be between 0 and 2^31 - 1")
        if self.subject is not None and not self.subject.strip():
            raise ValueError(f"Avro schema {self.schema}: subject must name the registry's subject, e.g. "
                             "'<topic>-value'")
        try:
            text = Path(self.schema).read_text()
            parsed = json.loads(text)
        except (OSError, ValueError) as err:
            raise ValueError(f"Avro schema {self.schema}: cannot read it as JSON ({err})") from None
        if not isinstance(parsed, dict) or parsed.get("type") != "record":
            raise ValueError(f"Avro schema {self.schema}: the {'reader' if self.subject else 'writer'} schema must "
                             "be a record")
        object.__setattr__(self, "schema_json", text)
        object.__setattr__(self, "parsed", parsed)

    @property
    def top_level(self) -> list[str]:
        """The names of the record's own fields."""
        return [f["name"] for f in self.parsed["fields"]]

    def type_at(self, path: tuple[str, ...]):
        """The Avro type at `path` (a union with null as its other branch), None when the schema has no such
        field."""
        node = self.parsed
        for part in path:
            node = _non_null(node)
            if not isinstance(node, dict) or node.get("type") != "record":
                return None
            node = next((f["type"] for f in node["fields"] if f["name"] == part), None)
            if node is None:
                return None
        return _non_null(node)


def _non_null(avro_type):
    if isinstance(avro_type, list):
        others = [t for t in avro_type if t != "null"]
        return others[0] if len(others) == 1 else avro_type
    return avro_type


#: The event times a pipeline accepts unless it declares its own range: an instant outside is dead-lettered
#: (`out_of_range_<field>`) on every path. Every layer holds these: Spark, Parquet, Delta, and Python's `datetime`
#: (years 1-9999), which the batch's newest event time and the watermarks pass through.
EVENT_TIMES = (datetime(2, 1, 1, tzinfo=timezone.utc), datetime(9999, 1, 1, tzinfo=timezone.utc))
# How far a declared range may reach: a day clear of Python's ends, so a window (at most a day), a local zone's offset
# or a day folder never leaves them, and the start also clear of the watermark's allowed lateness.
_SAFE_TIMES = (datetime(1, 1, 3, tzinfo=timezone.utc), datetime(9999, 12, 30, tzinfo=timezone.utc))


@dataclass(frozen=True)
class Pipeline:
    """A pipeline: `key` names the field the state is keyed by, or a tuple of several (a composite key).

    `event_times`: [earliest, end) of the instants its timestamp fields accept (EVENT_TIMES when None); a record
    with one outside is dead-lettered as `out_of_range_<field>`."""

    name: str
    key: str | tuple[str, ...]
    event_time: str
    event_id: str
    fields: tuple[Field, ...]
    aggregations: tuple[Aggregation, ...]
    windows: TumblingWindows | HoppingWindows | None = None
    description: str = ""
    avro: AvroFormat | None = None  # None: JSON values
    extra: dict = field(default_factory=dict, compare=False)
    event_times: tuple[datetime, datetime] | None = None

    def __post_init__(self):
        names = {f.name for f in self.fields}
        for f in self.fields:
            if f.name in RECORD_COLUMNS or f.name.startswith("__"):
                raise ValueError(f"pipeline {self.name}: a field cannot be named {f.name!r}, a column every record "
                                 f"carries ({', '.join(RECORD_COLUMNS)}, and names starting with __): rename it")
        paths = sorted((f.json_path, f.name) for f in self.fields)
        for (outer, outer_name), (inner, inner_name) in zip(paths, paths[1:]):
            if inner[:len(outer)] == outer:
                raise ValueError(f"pipeline {self.name}: fields {outer_name} and {inner_name} address "
                                 f"{'the same value' if inner == outer else 'a value and one inside it'} "
                                 f"({'.'.join(outer)}, {'.'.join(inner)}): give each field its own place")
        if not self.keys or len(set(self.keys)) != len(self.keys):
            raise ValueError(f"pipeline {self.name}: key {self.key!r} must name one field, or several different ones")
        for needed in (*self.keys, self.event_time, self.event_id):
            if needed not in names:
                raise ValueError(f"pipeline {self.name}: field {needed!r} is not declared")
        optional = [f.name for f in self.fields if f.name in self.keys and not f.required]
        if optional:
            raise ValueError(f"pipeline {self.name}: key field {optional[0]!r} must be required (a record without "
                             "it has no key)")
        for agg in self.all_aggregations:
            if agg.column and agg.column not in names:
                raise ValueError(f"pipeline {self.name}: aggregation {agg.name} reads undeclared field {agg.column!r}")
        self._check_event_times()
        for f in self.fields if self.avro else ():
            if self.avro.type_at(f.json_path) is None:
                raise ValueError(f"pipeline {self.name}: field {f.name} is at {'.'.join(f.json_path)}, which the Avro "
                                 f"schema {self.avro.schema} does not have")

    def _check_event_times(self) -> None:
        earliest, end = self.accepted_times
        if earliest.tzinfo is None or end.tzinfo is None:
            raise ValueError(f"pipeline {self.name}: event_times must be aware datetimes (tzinfo=timezone.utc)")
        floor = _SAFE_TIMES[0] + self.allowed_lateness
        if not floor <= earliest < end <= _SAFE_TIMES[1]:
            raise ValueError(f"pipeline {self.name}: event_times [{earliest.isoformat()}, {end.isoformat()}) must be a "
                             f"range within [{floor.isoformat()}, {_SAFE_TIMES[1].isoformat()}] (the start at least the "
                             "allowed lateness past 0001-01-03): declare a narrower one")

    @property
    def accepted_times(self) -> tuple[datetime, datetime]:
        """[earliest, end) of the event times the pipeline accepts: its declared range, else EVENT_TIMES."""
        return self.event_times if self.event_times is not None else EVENT_TIMES

    @property
    def keys(self) -> tuple[str, ...]:
        """The fields the state is keyed by: one, or several for a composite key."""
        return (self.key,) if isinstance(self.key, str) else tuple(self.key)

    @property
    def all_aggregations(self) -> tuple[Aggregation, ...]:
        return self.aggregations + (self.windows.aggregations if self.windows else ())

    @property
    def count_column(self) -> str | None:
        """A keyed count, when declared: lets the accounting read well-formed totals off the tiles."""
        return next((a.name for a in self.aggregations if a.kind == "count"), None)

    @property
    def allowed_lateness(self) -> timedelta:
        return self.windows.allowed_lateness if self.windows else timedelta(0)
