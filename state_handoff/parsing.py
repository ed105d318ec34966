"""The pipeline's parser: raw Kafka values to typed events or a dead-letter reason, in Spark SQL (no Python UDF)."""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from state_handoff.spec import Pipeline

# ISO-8601 with an explicit UTC designator or offset; anything else is malformed, however lenient Spark's cast.
ISO_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})$"

TOMBSTONE = "tombstone"
NOT_JSON_OBJECT = "not_json_object"


def missing(field: str) -> str:
    return f"missing_{field}"


def invalid(field: str) -> str:
    return f"bad_{field}"


def parse_events(pipeline: Pipeline, records: DataFrame) -> DataFrame:
    """Add the pipeline's typed fields and `error` (null when well-formed) to records with a binary `value`.

    Strings keep their JSON text; a number must be a finite JSON number (a quoted "12.5" is not);
    a timestamp must match ISO_TIMESTAMP and be a real instant.
    """
    raw = F.col("value").cast("string")
    as_text = ", ".join(f"`{f.name}` STRING" for f in pipeline.fields) + ", `_corrupt_record` STRING"
    # Numbers get a parse of their own, so a non-number in one field cannot blank the others.
    numbers = {f"__number_{f.name}": F.from_json(raw, f"`{f.name}` DOUBLE")[f.name]
               for f in pipeline.fields if f.type not in ("string", "timestamp")}
    parsed = records.withColumns({
        "__json": F.from_json(raw, as_text, {"columnNameOfCorruptRecord": "_corrupt_record"}), **numbers})
    is_object = (F.col("__json").isNotNull() & F.col("__json._corrupt_record").isNull()
                 & F.ltrim(raw).startswith("{"))
    typed: dict[str, Column] = {}
    checks: list[tuple[Column, str]] = [(F.col("value").isNull(), TOMBSTONE), (~is_object, NOT_JSON_OBJECT)]
    for f in pipeline.fields:
        text = F.col(f"__json.`{f.name}`")
        if f.type == "string":
            typed[f.name] = text
            bad = text.isNull() | (text == "")
            reason = missing(f.name)
        elif f.type == "timestamp":
            typed[f.name] = F.when(text.rlike(ISO_TIMESTAMP), F.expr(f"try_to_timestamp(`__json`.`{f.name}`)"))
            bad = typed[f.name].isNull()
            reason = invalid(f.name)
        else:
            number = F.col(f"__number_{f.name}")
            typed[f.name] = F.when(~F.isnan(number) & (F.abs(number) != F.lit(float("inf"))), number)
            bad = typed[f.name].isNull()
            reason = invalid(f.name)
        if f.required:
            checks.append((bad, reason))
    error = F.lit(None).cast("string")
    for condition, reason in reversed(checks):
        error = F.when(condition, F.lit(reason)).otherwise(error)
    kept = [c for c in records.columns if c not in typed]
    names = [f.name for f in pipeline.fields] + ["error"]
    typed_rows = parsed.select(*kept, *[typed[f.name].alias(f.name) for f in pipeline.fields], error.alias("error"))
    # One parse per record: a generator is a barrier the optimizer cannot push `error IS NULL` through,
    # whereas over plain projections the filter moves below the parse and evaluates from_json again.
    return typed_rows.select(*kept, F.inline(F.array(F.struct(*names))))
