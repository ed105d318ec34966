"""What an updates-topic record is made of, for the stream that sends them (jobs/stream/keyed.py) and for a cut that
takes keys out of the topic (jobs/rebase/rekey.py): its Kafka key, the header naming the handoff that wrote it, and the JSON
its state is written in."""

from __future__ import annotations

from pyspark.sql import functions as F

HANDOFF_HEADER = "switchyard.handoff"
# Microseconds survive the round trip through the updates topic (Spark's JSON default keeps milliseconds).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}


def update_key(keys: tuple[str, ...] | list[str]) -> F.Column:
    """An update record's Kafka key: the key's value, or for a composite key its fields as a JSON object."""
    if len(keys) == 1:
        return F.col(keys[0])
    return F.to_json(F.struct(*keys), JSON_OPTIONS)


def handoff_headers(handoff_id: str) -> F.Column:
    """The headers of a record `handoff_id` wrote."""
    return F.array(F.struct(F.lit(HANDOFF_HEADER).alias("key"), F.lit(handoff_id).cast("binary").alias("value")))
