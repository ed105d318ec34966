"""Sinks the backfill and the stream share: `dead_letter`'s rows for records that failed to parse, and the
tables both append to that neither may have made yet (`dead_letter`, `late`)."""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from state_handoff import storage
from state_handoff.spec import Pipeline
from state_handoff.tables import Tables


def dead_letter_rows(pipeline: Pipeline, malformed: DataFrame, phase: str, event_date: F.Column | None = None):
    """`dead_letter`'s rows for parsed records that failed to parse: dated by their event time when it parsed,
    else by their Kafka timestamp (`event_date`: a date the records already carry, as archived ones do)."""
    if event_date is None:
        event_date = F.coalesce(F.to_date(pipeline.event_time), F.to_date("kafka_timestamp"))
    return malformed.select("kafka_partition", "kafka_offset", "value", F.col("error").alias("reason"),
                            F.lit(phase).alias("phase"), F.current_timestamp().alias("recorded_at"),
                            event_date.alias("event_date"))


def ensure_tables(pipeline: Pipeline, tables: Tables) -> None:
    """Tables the stream appends to but the backfill may not have made (no malformed or late records yet),
    created empty through delta-rs: Spark's empty writes cost a job and a commit each."""
    import pyarrow as pa
    from deltalake import DeltaTable

    utc = pa.timestamp("us", tz="UTC")
    wanted = {
        tables.dead_letter: (pa.schema([("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                                        ("value", pa.binary()), ("reason", pa.string()), ("phase", pa.string()),
                                        ("recorded_at", utc), ("event_date", pa.date32())]), ["event_date"]),
        tables.late: (pa.schema([("kafka_partition", pa.int32()), ("kafka_offset", pa.int64()),
                                 (pipeline.key, pa.string()), (pipeline.event_time, utc), ("window_start", utc),
                                 ("watermark", utc), ("value", pa.binary()), ("recorded_at", utc)]), None),
    }
    for path, (schema, partition_by) in wanted.items():
        if not storage.exists(storage.join(path, "_delta_log")):
            DeltaTable.create(path, schema, mode="ignore", partition_by=partition_by,
                              storage_options=storage.delta_options(path))
