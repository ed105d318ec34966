"""Delta's idempotent writes for the stream's batches: (txnAppId, txnVersion = batch id), the app id naming the
checkpoint incarnation whose batch ids it counts."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession

from state_handoff import storage
from state_handoff.errors import UserError

_TXN_APP = "spark.databricks.delta.write.txnAppId"
_TXN_VERSION = "spark.databricks.delta.write.txnVersion"


class Txn:
    """MERGE and DELETE read (txnAppId, txnVersion) from the session, not from writer options. A foreachBatch
    function gets its query's own session, so two queries' batches never see each other's settings."""

    def __init__(self, spark: SparkSession, app_id: str, version: int):
        self.spark, self.app_id, self.version = spark, app_id, version

    def __enter__(self):
        self.spark.conf.set(_TXN_APP, self.app_id)
        self.spark.conf.set(_TXN_VERSION, str(self.version))

    def __exit__(self, *exc):
        self.spark.conf.unset(_TXN_APP)
        self.spark.conf.unset(_TXN_VERSION)


def append_once(df: DataFrame, path: str, app_id: str, batch_id: int, partition_by: str | None = None) -> None:
    writer = df.write.format("delta").mode("append").option("txnAppId", app_id).option("txnVersion", batch_id)
    if partition_by:
        writer = writer.partitionBy(partition_by)
    writer.save(path)


def merge_once(table, source, predicate: str, app_id: str, version: int, updates: dict[str, str] | None = None) -> bool:
    """A MERGE of a small Arrow table through delta-rs (no JVM: no Spark jobs, plans or generated code), once per
    (app_id, version): the same `txn` action Spark's idempotent writes record. `table` is a deltalake
    DeltaTable, brought up to date here; target rows are `t`, source rows `s`; `updates` (column -> SQL over
    `t` and `s`) for matched rows, every column from `s` when None. False when already committed."""
    from deltalake import CommitProperties, Transaction

    table.update_incremental()
    if (table.transaction_version(app_id) or -1) >= version:
        return False
    merger = table.merge(source, predicate=predicate, source_alias="s", target_alias="t",
                         commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)]))
    merger = merger.when_matched_update_all() if updates is None else merger.when_matched_update(updates)
    merger.when_not_matched_insert_all().execute()
    return True


def checkpoint_incarnation(checkpoint: str) -> str | None:
    """The query id Spark keeps in the checkpoint's `metadata`: the same across restarts from that checkpoint,
    new with a new one. None when the checkpoint has none yet."""
    metadata = storage.join(checkpoint, "metadata")
    try:
        return json.loads(storage.read_text(metadata).splitlines()[0])["id"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, IndexError, TypeError):
        raise UserError(f"the stream checkpoint's metadata file {metadata} is corrupt: restore the "
                        "checkpoint from a backup, or start over with `switchyard backfill` and "
                        "`switchyard handoff`") from None


class TxnApp:
    """A query's Delta transaction app id: the handoff and the incarnation of the query's checkpoint (which
    Spark writes as the query starts, before its first batch), so a fresh checkpoint's batch ids can never
    be mistaken for an old one's. `missing` names the incarnation of a checkpoint that was never started
    (a rebase catching up a handoff whose stream never ran)."""

    def __init__(self, base: str, checkpoint: str, missing: str | None = None):
        self.base, self.checkpoint, self.missing, self.incarnation = base, checkpoint, missing, None

    def __str__(self) -> str:
        if self.incarnation is None:
            self.incarnation = checkpoint_incarnation(self.checkpoint) or self.missing
            if self.incarnation is None:
                raise RuntimeError(f"the stream checkpoint {self.checkpoint} has no metadata file")
        return f"{self.base}-{self.incarnation}"
