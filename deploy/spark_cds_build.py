"""Makes the Spark driver's class archive (deploy/spark_cds.py) once, at setup: a driver built by the one session
builder runs a small switchyard workload and writes the classes it loaded as it exits.

    python -m switchyard.deploy.spark_cds_build     # deploy/setup.sh runs it; idempotent
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from switchyard.deploy.paths import PROJECT_ROOT
from switchyard.deploy.spark import build_spark
from switchyard.deploy.spark_cds import ENV, archive_path
from switchyard.state_handoff import settings


def _workload(spark) -> None:
    """What a switchyard driver does, small: Delta writes and a MERGE, JSON parsing, a shuffle, a stateful
    streaming query on RocksDB, the Kafka source planned (no broker needed)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    root = tempfile.mkdtemp(prefix="switchyard-cds-")
    rows = spark.range(2000).select(F.to_json(F.struct((F.col("id") % 97).alias("k"), F.col("id").alias("v")))
                                    .alias("value"))
    parsed = rows.select(F.from_json("value", "k long, v long").alias("e")).select("e.*")
    totals = parsed.groupBy("k").agg(F.sum("v").alias("v"), F.count("*").alias("n"))
    totals.write.format("delta").save(f"{root}/t")
    (DeltaTable.forPath(spark, f"{root}/t").alias("t").merge(totals.alias("s"), "t.k = s.k")
     .whenMatchedUpdateAll().whenNotMatchedInsertAll().execute())
    spark.read.format("delta").load(f"{root}/t").orderBy("k").collect()
    spark.readStream.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:9").option("subscribe", "t").load()
    query = (spark.readStream.format("rate").option("rowsPerSecond", 50).load()
             .groupBy((F.col("value") % 7).alias("k")).count()
             .writeStream.outputMode("update").format("noop")
             .option("checkpointLocation", f"{root}/checkpoint").trigger(processingTime="1 second").start())
    deadline = time.monotonic() + 60
    while (query.lastProgress is None or query.lastProgress["batchId"] < 2) and time.monotonic() < deadline:
        time.sleep(0.5)
    query.stop()


def build() -> Path:
    """Run the workload in a driver that writes the archive at its exit; idempotent."""
    path = archive_path()
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob("spark-driver-*.jsa"):  # made for another JDK or other jars
        stale.unlink()
    partial = path.with_name(f".{path.name}.{os.getpid()}")
    os.environ[ENV] = "0"
    os.environ["SWITCHYARD_JVM_OPTIONS"] = " ".join(filter(None, [settings.value("SWITCHYARD_JVM_OPTIONS"),
                                                                  f"-XX:ArchiveClassesAtExit={partial}",
                                                                  "-Xlog:cds=error,cds+dynamic=error"]))
    from pyspark import SparkContext

    spark = build_spark("switchyard-cds", profile="test")
    _workload(spark)
    spark.stop()
    gateway = SparkContext._gateway
    gateway.shutdown()
    gateway.proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive as it does
    gateway.proc.wait(timeout=300)
    if not partial.exists():
        raise RuntimeError(f"the driver JVM exited without writing {partial}")
    partial.replace(path)
    return path


def main() -> int:
    """Build the archive unless it exists, the driver's chatter in a log beside it (shown when it fails)."""
    path = archive_path()
    if path.exists():
        return 0
    print("switchyard setup: archiving the Spark driver's classes (once; drivers then start faster)", file=sys.stderr)
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.parent / "build.log"
    with open(log, "w") as out:
        built = subprocess.run([sys.executable, "-c", "from switchyard.deploy.spark_cds_build import build; build()"],
                               cwd=PROJECT_ROOT, stdout=out, stderr=subprocess.STDOUT)
    if built.returncode != 0:
        print(log.read_text()[-3000:], file=sys.stderr)
        print(f"switchyard setup: archiving the driver's classes failed (exit {built.returncode}); see {log}",
              file=sys.stderr)
        return 1
    print(f"switchyard setup: {path.name} written in {time.monotonic() - started:.0f}s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
