"""The seed: the state at a handoff's version as Parquet files, which the keyed query reads as a file stream
source beside the events (jobs/stream/keyed.py). The backfill's commit writes them with the state; a stream
whose handoff has none writes them before it starts. The seed's files are recorded in the keyed checkpoint, so a
restart never seeds again."""

from __future__ import annotations

import json

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from switchyard.jobs.sinks import ensure_tables
from switchyard.state_handoff import faults
from switchyard.state_handoff.control.handoffs import Handoff
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage
from switchyard.state_handoff.language.aggregates import partial_columns
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.layout import StreamPaths
from switchyard.state_handoff.tables import Tables

# Events a keyed row carries: 0 in the seed, 1 for each stream input, so the merged state tells seed-only keys apart.
EVENTS_SEEN = "stream_events"
# Each `state` row's version: an update replaces a row only when its version is newer, so a key never moves back
# (updates of one key that arrive out of order, a replayed batch). The backfill writes 0; the stream of a handoff
# writes (its commit time in seconds << 32) + the key's stream events so far, which grows with every event of the
# key and is above any version of an earlier handoff.
UPDATE_VERSION = "update_version"
SPARK_ROW_METADATA = b"org.apache.spark.sql.parquet.row.metadata"  # Spark's schema in the Parquet files it writes


def version_base(committed_at) -> int:
    """The first version of a handoff's updates (see UPDATE_VERSION): its commit time in seconds, shifted past the
    count of a key's events."""
    return int(committed_at.timestamp()) << 32


def seed_files(spark: SparkSession, pipeline: Pipeline, tables: Tables, state_version: int, seed: str,
               state: DataFrame | None = None) -> None:
    """Write the state at `state_version` as seed rows (Spark's job commit writes `_SUCCESS` last); `state`: those
    rows already at hand (the backfill's commit, which just wrote them), not read again."""
    if state is None:
        state = spark.read.format("delta").option("versionAsOf", state_version).load(tables.state)
    state.select(*pipeline.keys, *partial_columns(pipeline.aggregations, keyed=True),
                 F.lit(0).cast("long").alias(EVENTS_SEEN)).write.mode("overwrite").parquet(str(seed))


def prepare_stream(spark: SparkSession, pipeline: Pipeline, tables: Tables, handoff_id: str, state_version: int,
                   state: DataFrame) -> None:
    """What the handoff's stream would otherwise do first, done by the backfill's commit while its JVM is warm: the
    seed's files (`state`, the rows just written as `state_version`), and the tables the stream appends to. The
    stream checks and skips both."""
    seed_files(spark, pipeline, tables, state_version, StreamPaths.of(tables, handoff_id).seed, state)
    ensure_tables(pipeline, tables)


def write_seed(spark: SparkSession, pipeline: Pipeline, tables: Tables, handoff: Handoff, paths: StreamPaths) -> None:
    """The state at the handoff's version, once, as the seed source's files: the backfill's commit wrote them
    with the state (seed_files); a handoff without them (or an interrupted write) gets them here."""
    if not storage.exists(paths.seed_written):
        if storage.exists(paths.keyed_checkpoint):
            raise UserError(f"the seed of handoff {handoff.handoff_id} ({paths.seed}) is gone but its stream "
                            "checkpoint refers to it: restore the folder from a backup, or start over with "
                            "`switchyard backfill` and `switchyard handoff`")
        seed_files(spark, pipeline, tables, handoff.state_version, paths.seed)
    faults.reach("stream.after_seed")


def seed_schema(spark: SparkSession, seed: str) -> StructType:
    """The seed's schema as Spark wrote it into its files' footers, read with pyarrow: no Spark job on a stream's
    way to SWITCHED (Spark's own read lists the folder and runs a job over a footer). Spark's read when no file
    carries it."""
    import pyarrow.parquet as pq

    part = next((n for n in storage.list_dir(seed) if n.startswith("part-") and n.endswith(".parquet")), None)
    if part is not None:
        with storage.open_input(storage.join(seed, part)) as source:
            written = (pq.read_schema(source).metadata or {}).get(SPARK_ROW_METADATA)
        if written:  # as Spark's read gives it: every field nullable, whatever the writer knew
            return StructType.fromJson(_as_nullable(json.loads(written)))
    return spark.read.parquet(seed).schema


def _as_nullable(schema_json):
    if isinstance(schema_json, dict):
        return {k: True if k in ("nullable", "containsNull", "valueContainsNull") else _as_nullable(v)
                for k, v in schema_json.items()}
    if isinstance(schema_json, list):
        return [_as_nullable(v) for v in schema_json]
    return schema_json
