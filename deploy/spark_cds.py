"""A class-data-sharing archive of the Spark driver's classes (JDK AppCDS), made once at setup.

A driver JVM loads and verifies ~20,000 classes before its first job; with the archive it maps them from one file
instead. The archive is valid only for the JDK and the classpath it was made with, so its name carries a digest
of both: a new JDK or jar makes `make setup` build another, and until then the JVM starts without one. A JVM
given an archive that does not match its classpath ignores it (-Xshare:auto, the default) and runs as without.

    python -m deploy.spark_cds     # build it (deploy/setup.sh does); idempotent
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from deploy.paths import PROJECT_ROOT, jar_dir

ENV = "SWITCHYARD_SPARK_CDS"  # "0" starts drivers without the archive


def archive_path() -> Path:
    """Where the archive for this JDK, this pyspark and these jars lives (it may not exist). Beside the jars:
    a test's SWITCHYARD_HOME links them, so its drivers find the one archive too."""
    import pyspark

    from deploy.jars import spark_extra_jars
    from deploy.java import java_executable

    java = Path(java_executable()).resolve()
    jars = sorted(Path(pyspark.__file__).parent.joinpath("jars").glob("*.jar")) + spark_extra_jars()
    key = [str(java), java.stat().st_mtime_ns, pyspark.__version__, [(str(j), j.stat().st_size) for j in jars]]
    return jar_dir("cds") / f"spark-driver-{hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]}.jsa"


def driver_options() -> str:
    """The driver JVM's option that maps the archive, or "" when there is none (or SWITCHYARD_SPARK_CDS=0)."""
    if os.environ.get(ENV) == "0":
        return ""
    path = archive_path()
    # quiet: a JVM that cannot map it (another classpath) says so on stdout, which is the command's output
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off,cds+dynamic=off" if path.exists() else ""


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
    os.environ["SWITCHYARD_JVM_OPTIONS"] = " ".join(filter(None, [os.environ.get("SWITCHYARD_JVM_OPTIONS"),
                                                                  f"-XX:ArchiveClassesAtExit={partial}",
                                                                  "-Xlog:cds=error,cds+dynamic=error"]))
    from pyspark import SparkContext

    from deploy.spark import build_spark

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
    import subprocess

    path = archive_path()
    if path.exists():
        return 0
    print("switchyard setup: archiving the Spark driver's classes (once; drivers then start faster)", file=sys.stderr)
    started = time.monotonic()
    path.parent.mkdir(parents=True, exist_ok=True)
    log = path.parent / "build.log"
    with open(log, "w") as out:
        built = subprocess.run([sys.executable, "-c", "from deploy.spark_cds import build; build()"],
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
