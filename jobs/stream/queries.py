"""Spark's streaming queries as the stream's driver handles them: how they keep their checkpoints, their progress
read in one call to the JVM, the cause of a failure, and stopping them."""

from __future__ import annotations

import json
import re

from switchyard.state_handoff.io import storage
from switchyard.state_handoff.stream.layout import StreamPaths, write_json_atomically


def checkpoint_conf(checkpoint: str) -> dict[str, str]:
    """How the stream's queries keep their checkpoints.

    A full RocksDB snapshot at each commit, not changelog files: Spark 4.0's streaming aggregation aborts its read
    store once the restore has read it (SPARK-46547), which for RocksDB drops the loaded version, so every batch
    reloads the store from the checkpoint. With changelog checkpointing that reload replays each changelog since
    the last snapshot the maintenance thread uploaded (once a minute); with a snapshot per commit it opens the
    latest one, whose files are already local. Spark 4.1 keeps the read store (SPARK-51955).

    On a local file system, checkpoint files through Hadoop's FileSystem rather than its FileContext: without
    Hadoop's native library, each FileContext rename forks `readlink` twice, which makes writing the offset and
    commit logs several times slower. FileSystem checks that a file is new, then renames, where FileContext
    renames without overwriting; the lease, not that rename, is what keeps a second driver off a checkpoint.
    """
    conf = {"spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "false"}
    if not storage.is_object_store(checkpoint):
        # Spark 4.1 moved the class from `streaming` into `streaming.checkpointing`
        package = "streaming" if _spark_line() < (4, 1) else "streaming.checkpointing"
        conf["spark.sql.streaming.checkpointFileManagerClass"] = \
            f"org.apache.spark.sql.execution.{package}.FileSystemBasedCheckpointFileManager"
    return conf


def _spark_line() -> tuple[int, int]:
    """pyspark's (major, minor): the Spark whose jars the driver runs."""
    import pyspark

    major, minor = re.findall(r"\d+", pyspark.__version__)[:2]
    return int(major), int(minor)


def first_line(err) -> str:
    return (str(err).strip().splitlines() or [type(err).__name__])[0][:300]


def query_error(err) -> str:
    """The cause, when a foreachBatch function raised it: the last `SomeError: message` line of the Python
    traceback Spark wraps; else the exception's first line."""
    causes = [line.strip() for line in str(err).splitlines()
              if re.match(r"^\s*[A-Za-z_.]*(Error|Exception|Failed|Lost): ", line)]
    return causes[-1][:300] if causes else first_line(err)


def stop_all(queries) -> None:
    for query in queries:
        try:
            query.stop()
        except Exception:  # already failed; its error is what gets reported
            pass


def last_progress(query) -> dict:
    """`query.lastProgress` as a dict ({} before the first batch), in two calls to the JVM. PySpark's builds its
    object getter by getter, and each Java collection it iterates ends in an exception that PySpark's error handler
    inspects with a dozen reflective lookups, most of them class names searched for in every jar: hundreds of
    lookups a call, which at the monitor's few calls a poll keep an idle stream's driver busy."""
    progress = query._jsq.lastProgress()
    return json.loads(progress.json()) if progress is not None else {}


def kafka_end_offsets(progress: dict, topic: str) -> dict[int, int] | None:
    """A query's Kafka end offsets of `topic` from its last progress (None before its first batch)."""
    for source in progress.get("sources", []):
        if source["description"].startswith("KafkaV2"):
            end = source["endOffset"]
            end = json.loads(end) if isinstance(end, str) else end
            return {int(p): int(o) for p, o in (end or {}).get(topic, {}).items()}
    return None


def recent_progress(query) -> list[dict]:
    """`query.recentProgress` in one call to the JVM: PySpark's asks for each batch's JSON in turn, which makes a
    stop wait on every batch the queries remember. Scala prints an array as `Array(a, b)` with each element's
    toString, a progress's JSON."""
    from pyspark import SparkContext

    printed = SparkContext._jvm.scala.runtime.ScalaRunTime.stringOf(query._jsq.recentProgress())
    return json.loads("[" + printed.removeprefix("Array(").removesuffix(")") + "]")


def _state_store_ms(operators: list[dict]) -> dict:
    """A batch's state-store time, summed over its stateful operators: the updates, the commit, and the commit's
    own steps as the RocksDB provider reports them (its flush, checkpoint and the upload of a snapshot)."""
    times: dict = {}
    for operator in operators:
        for name in ("allUpdatesTimeMs", "allRemovalsTimeMs", "commitTimeMs"):
            times[name] = times.get(name, 0) + operator.get(name, 0)
        for name, value in (operator.get("customMetrics") or {}).items():
            if name.startswith("rocksdbCommit") or name == "rocksdbSstFileSize":
                times[name] = times.get(name, 0) + value
        times["rows"] = times.get("rows", 0) + operator.get("numRowsTotal", 0)
    return times


def keep_recent_progress(queries, paths: StreamPaths) -> None:
    """Each query's last batches (rows, per-phase durations) beside the checkpoints, for where the time goes."""
    try:
        history = {q.name: [{"batch_id": p["batchId"], "rows": p["numInputRows"], "duration_ms": p["durationMs"],
                             **({"state_ms": _state_store_ms(p["stateOperators"])} if p.get("stateOperators") else {})}
                            for p in recent_progress(q)] for q in queries}
        write_json_atomically(paths.recent_progress, history)
    except Exception:  # a diagnostic: never what keeps a stop from draining and logging STOPPED
        pass
