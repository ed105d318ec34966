"""The pipeline's parser: raw Kafka values to typed events or a dead-letter reason, in Spark SQL (no Python UDF)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from functools import partial, reduce

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from switchyard.state_handoff.language.avro_writers import UNSEEN, UNSEEN_IDS, writer_schemas
from switchyard.state_handoff.language.record_limits import DEAD_LETTER_PREFIX_BYTES, TOO_LARGE, max_record_bytes
from switchyard.state_handoff.language.spec import AVRO_TIMESTAMPS, Pipeline

EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
# ISO-8601 with an explicit UTC designator or offset; anything else is malformed, however lenient Spark's cast.
ISO_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"

TOMBSTONE = "tombstone"
NOT_JSON_OBJECT = "not_json_object"


def too_large(limit: int | None = None) -> Column:
    """True for a record whose value has more bytes than `limit` (the setting when None)."""
    return F.octet_length("value") > F.lit(max_record_bytes() if limit is None else limit)


def dead_letter_value(limit: int | None = None) -> Column:
    """A dead letter's copy of the value: whole when within the limit, else its first DEAD_LETTER_PREFIX_BYTES,
    cut by Spark before any row reaches the driver."""
    return F.when(too_large(limit), F.substring("value", 1, DEAD_LETTER_PREFIX_BYTES)).otherwise(F.col("value"))


def missing(field: str) -> str:
    return f"missing_{field}"


def invalid(field: str) -> str:
    return f"bad_{field}"


def out_of_range(field: str) -> str:
    return f"out_of_range_{field}"


def instant(moment: datetime) -> Column:
    """An aware datetime as a Spark TIMESTAMP literal, exact to the microsecond whatever the session's zone."""
    return F.timestamp_micros(F.lit((moment - EPOCH) // timedelta(microseconds=1)))


def within(pipeline: Pipeline, timestamp: Column) -> Column:
    """True for an instant inside the pipeline's accepted event times (Pipeline.accepted_times)."""
    earliest, end = pipeline.accepted_times
    return (timestamp >= instant(earliest)) & (timestamp < instant(end))


def _ddl(fields, leaf_type) -> str:
    """A from_json schema holding each field at its path: nested keys as STRUCTs, leaves as `leaf_type(field)`."""
    tree: dict = {}
    for f in fields:
        node = tree
        for part in f.json_path[:-1]:
            node = node.setdefault(part, {})
        node[f.json_path[-1]] = leaf_type(f)

    def render(node: dict, nested: bool) -> str:
        sep = ": " if nested else " "
        return ", ".join(f"`{k}`{sep}" + (f"STRUCT<{render(v, True)}>" if isinstance(v, dict) else v)
                         for k, v in node.items())

    return render(tree, False)


def _at(column: str | Column, path: tuple[str, ...]) -> Column:
    """The value at `path` inside the struct `column`."""
    found = F.col(column) if isinstance(column, str) else column
    for part in path:
        found = found.getField(part)
    return found


def parse_events(pipeline: Pipeline, records: DataFrame, live: bool = False) -> DataFrame:
    """Add the pipeline's typed fields and `error` (null when well-formed) to records with a binary `value`.

    JSON values (the default): strings keep their JSON text; a number must be a finite JSON number (a quoted "12.5"
    is not); a timestamp must match ISO_TIMESTAMP and be a real instant, inside the pipeline's accepted event times
    (out_of_range_<field> when not; an optional field outside them is null). Avro values (`Pipeline.avro`): see
    `_avro_fields`. A field is read at its path (`Field.path`); an object on the way that is missing or not an
    object leaves it missing. A value above `max_record_bytes()` is TOO_LARGE, and not parsed. `live`: the plan
    of a stream, which outlives the Avro writer schemas it was built with (state_handoff/language/avro_writers.py).
    """
    oversized = too_large()
    fields = partial(_avro_fields, live=live) if pipeline.avro else _json_fields
    parsed, texts, numbers, times, checks = fields(pipeline, records, oversized)
    checks = [(F.col("value").isNull(), TOMBSTONE), (oversized, TOO_LARGE), *checks]
    typed: dict[str, Column] = {}
    for i, f in enumerate(pipeline.fields):
        text = texts.get(f.name)
        if f.type == "string":
            typed[f.name] = text
            bad = text.isNull() | (text == "")
            reason = missing(f.name)
        elif f.type == "timestamp":
            if f.name in times:
                read = times[f.name]
            else:  # a column of its own, evaluated once: the value and the checks below read it several times,
                # each inside a condition, which Spark's common-subexpression elimination does not share
                parsed = parsed.withColumn(f"__read_{i}", F.when(text.rlike(ISO_TIMESTAMP), F.try_to_timestamp(text)))
                read = F.col(f"__read_{i}")
            typed[f.name] = F.when(within(pipeline, read), read)
            if f.required:
                checks.append((read.isNotNull() & typed[f.name].isNull(), out_of_range(f.name)))
            bad = read.isNull()
            reason = invalid(f.name)
        else:
            number = numbers[f.name]
            typed[f.name] = F.when(~F.isnan(number) & (F.abs(number) != F.lit(float("inf"))), number)
            bad = typed[f.name].isNull()
            reason = invalid(f.name)
        if f.required:
            checks.append((bad, reason))
    error = F.lit(None).cast("string")
    for condition, reason in reversed(checks):
        error = F.when(condition, reason if isinstance(reason, Column) else F.lit(reason)).otherwise(error)
    kept = [c for c in records.columns if c not in typed]
    names = [f.name for f in pipeline.fields] + ["error"]
    typed_rows = parsed.select(*kept, *[typed[f.name].alias(f.name) for f in pipeline.fields], error.alias("error"))
    # One parse per record: a generator is a barrier the optimizer cannot push `error IS NULL` through,
    # whereas over plain projections the filter moves below the parse and evaluates from_json again.
    return typed_rows.select(*kept, F.inline(F.array(F.struct(*names))))


def _json_fields(pipeline: Pipeline, records: DataFrame, oversized: Column):
    """JSON values: (records with the parse's columns, each field's text, each number field's value, the
    timestamps the decoder typed itself (none for JSON), the checks before the fields')."""
    raw = F.when(~oversized, F.col("value").cast("string"))
    corrupt = {"columnNameOfCorruptRecord": "_corrupt_record"}
    numeric = [f for f in pipeline.fields if f.type not in ("string", "timestamp")]
    top_level = list(dict.fromkeys(f.json_path[0] for f in pipeline.fields))
    as_text = ", ".join(f"`{key}` STRING" for key in top_level) + ", `_corrupt_record` STRING"
    as_typed = _ddl(pipeline.fields, lambda f: "DOUBLE" if f in numeric else "STRING")
    # One parse with the numbers typed answers for every record it accepts: a JSON object whose numbers convert
    # (a string field takes any JSON value as its text, so only a number, an object on a field's path, or the
    # syntax can fail). A record it refuses, few in any topic, parses again: its top-level keys as text, to tell a
    # JSON object from anything else, each nested field alone, and each number alone, so a non-number in one field
    # cannot blank the others. A second full parse of every record would double the costliest part of a scan.
    parsed = records.withColumn("__typed", F.from_json(raw, as_typed + ", `_corrupt_record` STRING", corrupt))
    refused = F.col("__typed._corrupt_record").isNotNull()
    parsed = parsed.withColumns({
        "__json": F.when(refused, F.from_json(raw, as_text, corrupt)),
        **{f"__number_{f.name}": F.when(refused, _at(F.from_json(raw, _ddl([f], lambda _: "DOUBLE")), f.json_path))
           .otherwise(_at("__typed", f.json_path)) for f in numeric}})
    is_object = (F.when(refused, F.col("__json").isNotNull() & F.col("__json._corrupt_record").isNull())
                 .otherwise(F.col("__typed").isNotNull()) & F.ltrim(raw).startswith("{"))
    texts = {}
    for f in pipeline.fields:
        top, *inside = f.json_path
        again = (F.get_json_object(raw, "$" + "".join(f"['{part}']" for part in f.json_path)) if inside
                 else F.col("__json").getField(top))
        texts[f.name] = F.when(refused, again).otherwise(_at("__typed", f.json_path))
    numbers = {f.name: F.col(f"__number_{f.name}") for f in numeric}
    return parsed, texts, numbers, {}, [(~is_object, NOT_JSON_OBJECT)]


NOT_CONFLUENT_AVRO = "not_confluent_avro"
UNKNOWN_SCHEMA_ID = "unknown_schema_id"  # each is followed by _<the id>
INCOMPATIBLE_SCHEMA_ID = "incompatible_schema_id"
BAD_AVRO = "bad_avro"


def _avro_fields(pipeline: Pipeline, records: DataFrame, oversized: Column, live: bool = False):
    """Avro values in Confluent's wire format, each decoded with the writer schema its id names
    (state_handoff/language/avro_writers.py) into the pipeline's schema: a value shorter than its 5-byte header or without
    the zero magic byte is NOT_CONFLUENT_AVRO; one of an id that is no writer schema of the pipeline is
    `unknown_schema_id_<id>`, one of a schema the pipeline's cannot read `incompatible_schema_id_<id>`; one whose
    body does not decode BAD_AVRO. A string field takes any Avro value as its text; a number is a finite int, long,
    float or double; a timestamp an Avro timestamp, or a string that is an ISO-8601 instant. `live`: a record of an
    id just above every id known now fails the plan, naming it (avro_writers.UNSEEN)."""
    from pyspark.sql.avro.functions import from_avro

    avro = pipeline.avro
    writers = writer_schemas(avro)
    value = F.col("value")
    framed = (F.octet_length(value) > 5) & (F.hex(F.substring(value, 1, 1)) == "00")
    schema_id = F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long")
    body = F.when(~oversized & framed, F.expr("substring(value, 6)"))
    # Each id's writer schema, read into the pipeline's (the registry's case): one branch per id, evaluated only for
    # its own records; with no id to read, a null of the pipeline's record type.
    options = {"mode": "PERMISSIVE", **({"avroSchema": avro.schema_json} if avro.subject else {})}
    decoded = from_avro(F.lit(None).cast("binary"), avro.schema_json, {"mode": "PERMISSIVE"})
    for known, text in sorted(writers.readable.items(), reverse=True):
        decoded = F.when(schema_id == known, from_avro(body, text, options)).otherwise(decoded)
    parsed = records.withColumn("__avro", decoded)
    texts, numbers, times = {}, {}, {}
    for f in pipeline.fields:
        found = _at("__avro", f.json_path)
        kind = avro.type_at(f.json_path)
        logical = kind.get("logicalType") if isinstance(kind, dict) else None
        texts[f.name] = found.cast("string")
        if f.type == "timestamp" and logical in AVRO_TIMESTAMPS:
            times[f.name] = found
        if f.type == "number":
            numbers[f.name] = found.cast("double") if kind in ("int", "long", "float", "double") else \
                F.lit(None).cast("double")
    # PERMISSIVE decoding leaves a body that is not a record of the schema null, or a record of nothing but nulls
    undecoded = F.col("__avro").isNull() | reduce(lambda a, b: a & b,
                                                  [F.col("__avro").getField(name).isNull() for name in avro.top_level])
    named = schema_id.cast("string")
    unknown = ~schema_id.isin([*writers.readable, *writers.incompatible])
    checks = [(~framed, NOT_CONFLUENT_AVRO),
              (schema_id.isin(list(writers.incompatible)), F.concat(F.lit(INCOMPATIBLE_SCHEMA_ID + "_"), named)),
              (unknown, F.concat(F.lit(UNKNOWN_SCHEMA_ID + "_"), named)), (undecoded, BAD_AVRO)]
    if live and avro.subject:
        unseen = F.concat(F.lit(f"{UNSEEN} "), named, F.lit(f": not a version of subject {avro.subject} when the "
                                                             "stream's queries started"))
        ahead = (schema_id > writers.newest) & (schema_id <= writers.newest + UNSEEN_IDS)
        if writers.absent:
            ahead = ahead & ~schema_id.isin(sorted(writers.absent))
        checks.insert(1, (unknown & ahead, F.raise_error(unseen).cast("string")))
    return parsed, texts, numbers, times, checks


def cached_for_two_passes(pipeline: Pipeline, parsed: DataFrame) -> DataFrame:
    """Parsed records kept on local disk (not the heap) for an aggregation and the dead letters, so neither parses
    again: every record's partition, `error` and the fields an aggregation reads; the rest of the record (its value,
    offset, date...) only when it failed, for its dead letter. Fields nothing reads are left out.

    Building the cache costs more than reading it, so it holds no more than the two passes read, and is written
    without columnar compression (deploy/spark.py)."""
    used = {*pipeline.keys, pipeline.event_time, pipeline.event_id,
            *(a.column for a in pipeline.all_aggregations if a.column)}
    fields = {f.name for f in pipeline.fields}
    failed = F.col("error").isNotNull()
    kept = [F.col(c) if c in used or c in ("kafka_partition", "error") else F.when(failed, F.col(c)).alias(c)
            for c in parsed.columns if c in used or c not in fields]
    return parsed.select(*kept).persist(StorageLevel.DISK_ONLY)
