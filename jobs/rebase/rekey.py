"""The updates topic at a cut: it carries each key's newest state, so before the handoff at a cut commits, it gets
every key whose recomputed state differs from what it last carried (`publish_changed_keys`); a change of key (or of
parse) moves the whole topic (`rekey_updates_topic`).

Under the same key the topic last carried the streamed state as `state` holds it drained at the pause (the keyed
query's updates up to where it stopped, K, all applied): the keys whose recomputed state at the cut differs from that
are those the records of [K, cut) changed (and any the reconciliation found different), and only they are sent, each
with its whole state. Sent again when a rerun finishes the rebase at its cut: a key's whole state sent twice changes
nothing. Their version (`update_version`) is the base of the commit at the cut: above every update of the handoffs
before it, below every update of the stream after it (jobs/seed.py: UPDATE_VERSION).

A redeploy to another key: the state keyed by other fields, switched in at a cut (jobs/rebase/redeploy.py).

Nothing of the recorded definition's state can be re-keyed, so the whole keyed history is computed again: every
archived day tiled under the changed definition beside the live stream (jobs/rebase/beside.py), the Kafka range
past the archive merged at the cut, and the windows, which are per key, made again there (jobs/backfill/commit.py:
AtCut.windows_past). A key field is a required field, so the dead letters are the same under either key and go on
as the stream made them. Two things differ from a redeploy under the same key:
- the reconciliation compares the two states merged over all their keys (jobs/rebase/reconciliation.py:
  `merged_over_all_keys`): a count's total, a sum's, the smallest minimum, the newest `last`, one sketch of every
  distinct value; equal when both keyings hold every record once;
- the updates topic (compacted by key) holds the recorded definition's last update of every key it streamed, keyed
  the old way: here the cut sends a tombstone for each key of the recorded state the changed one does not hold, then
  every key of the changed state, so a reader of the topic has the old keys up to the cut and the new ones after it.
Both are sent again when a rerun finishes the redeploy at its cut: a tombstone, or a key's whole state, sent twice
changes nothing. A redeploy whose records parse otherwise (jobs/rebase/reparse.py) moves the topic the same way:
any key's state may have changed, and a key may be gone."""

from __future__ import annotations

import logging

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from switchyard.jobs.seed import UPDATE_VERSION, version_base
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.kafka_security import spark_options
from switchyard.state_handoff.language.definition import DefinitionChange
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.update_records import JSON_OPTIONS, handoff_headers, update_key
from switchyard.state_handoff.tables import Tables

logger = logging.getLogger(__name__)
KAFKA_KEY = "switchyard_kafka_key"  # not a key field's name: a state may have a field called `key`


def publish_changed_keys(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, cut,
                         backfill: handoff_log.LogEntry, out=logger.info) -> int:
    """Send the updates topic every key whose state at the cut (`backfill`'s state version) differs from the drained
    streamed state the pause recorded (`cut.state_version`), before the handoff at the cut commits; returns how many.
    Nothing when no stream ever sent an update."""
    topic = PipelineView.read(tables).updates_topic
    if topic is None or cut.state_version is None:
        return 0
    reader = spark.read.format("delta")
    then = reader.option("versionAsOf", cut.state_version).load(tables.state)
    now = spark.read.format("delta").option("versionAsOf", backfill.state_version).load(tables.state)
    compared = [c for c in now.columns if c != UPDATE_VERSION]
    if set(compared) == {c for c in then.columns if c != UPDATE_VERSION}:
        changed = now.join(now.select(*compared).exceptAll(then.select(*compared)).select(*pipeline.keys).distinct(),
                           list(pipeline.keys), "left_semi")
    else:  # a redeploy (or rollback) that added, dropped or renamed an aggregation: every key's record has another shape
        changed = now
    changed = changed.withColumn(UPDATE_VERSION, F.lit(version_base(backfill.at)).cast("long")).persist()
    try:
        sent = changed.count()
        if sent:
            (changed.select(update_key(pipeline.keys).cast("binary").alias("key"),
                            F.to_json(F.struct(*[F.col(c) for c in now.columns]), JSON_OPTIONS).cast("binary")
                            .alias("value"),
                            handoff_headers(backfill.handoff_id).alias("headers"))
             .write.format("kafka").options(**spark_options(bootstrap), **{"kafka.acks": "all", "topic": topic})
             .save())
    finally:
        changed.unpersist()
    out(f"rebase {pipeline.name}: the updates topic {topic} sent the {sent} key(s) whose state at the cut differs "
        "from what it carried")
    return sent


def rekey_updates_topic(spark: SparkSession, pipeline: Pipeline, tables: Tables, bootstrap: str, cut,
                        change: DefinitionChange, backfill: handoff_log.LogEntry, out=logger.info) -> None:
    """The updates topic moved to `pipeline`'s key at `cut` (the paused handoff's Cut), for the handoff that
    `backfill` (its BACKFILL_COMMITTED) commits: the old keys (`change`'s recorded ones) the changed state does not
    hold tombstoned, then every key of the changed state sent. Nothing when no stream ever sent an update."""
    topic = PipelineView.read(tables).updates_topic
    if topic is None:
        return
    reader = spark.read.format("delta")
    then = (reader.option("versionAsOf", cut.state_version) if cut.state_version is not None else reader).load(
        tables.state)
    now = spark.read.format("delta").option("versionAsOf", backfill.state_version).load(tables.state)
    kept = now.select(update_key(pipeline.keys).cast("binary").alias(KAFKA_KEY))
    gone = (then.select(update_key(change.recorded_keys).cast("binary").alias(KAFKA_KEY)).distinct()
            .join(kept, KAFKA_KEY, "left_anti"))
    headers = handoff_headers(backfill.handoff_id).alias("headers")
    writer_options = {**spark_options(bootstrap), "kafka.acks": "all", "topic": topic}
    (gone.select(F.col(KAFKA_KEY).alias("key"), F.lit(None).cast("binary").alias("value"), headers)
     .write.format("kafka").options(**writer_options).save())
    (now.select(update_key(pipeline.keys).cast("binary").alias("key"),
                F.to_json(F.struct(*[F.col(c) for c in now.columns]), JSON_OPTIONS).cast("binary").alias("value"),
                headers)
     .write.format("kafka").options(**writer_options).save())
    out(f"rebase {pipeline.name}: the updates topic {topic} moved to the changed definition, keyed by "
        f"({', '.join(pipeline.keys)}): the recorded keys it does not hold tombstoned, every key of the state at the "
        "cut sent")
