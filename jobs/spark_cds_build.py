"""Makes the Spark driver's class archive (deploy/spark_cds.py) once, at setup: a driver built by the one session
builder runs a small switchyard workload and writes the classes it loaded as it exits. The workload runs the jobs,
so it lives with them; deploy/ only says where the archive is and how a driver maps it.

    python -m switchyard.jobs.spark_cds_build     # deploy/setup.sh runs it; idempotent
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
    streaming query on RocksDB, interpreted (as the test profile runs) and compiled (as every other driver does);
    then a pipeline's whole way through a broker of its own (_pipeline)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    root = tempfile.mkdtemp(prefix="switchyard-cds-")
    spark.conf.set("spark.sql.codegen.wholeStage", "false")  # first interpreted, as the test profile runs
    spark.conf.set("spark.sql.codegen.factoryMode", "NO_CODEGEN")
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
    # the rest compiled, as a driver of the default profile runs it: Janino's classes, the generated code's
    spark.conf.set("spark.sql.codegen.wholeStage", "true")
    spark.conf.set("spark.sql.codegen.factoryMode", "FALLBACK")
    _pipeline(spark, Path(root))


def _pipeline(spark, root: Path) -> None:
    """The demo pipeline archived, backfilled, handed off and streamed until caught up, on a broker started for it
    (127.0.0.1, stopped after): the Kafka clients' classes (admin, consumer, producer, the Spark connector's reader
    and sink), the seed's file source, the stream's supervisor and its Delta-writing queries. Without the broker's
    jars (an installed copy) the archive holds the rest."""
    from switchyard.deploy import kafka_broker
    from switchyard.deploy.local_server import free_ports
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.backfill import run_backfill
    from switchyard.jobs.handoff import run_handoff
    from switchyard.jobs.inputs.generate import run_generate
    from switchyard.jobs.stream import StreamOptions, run_stream
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables

    broker = kafka_broker.Broker.at(free_ports(2), root / "kafka")
    try:
        print(kafka_broker.start(broker), flush=True)
    except Exception as err:  # the archive only makes drivers start faster: without the broker it holds less
        print(f"no broker for the pipeline's classes ({err}); the archive holds the rest", flush=True)
        return
    try:
        pipeline, topic, quiet = get_pipeline("demo"), "cds", (lambda *_: None)
        with open(os.devnull, "w") as devnull:
            run_generate(broker.bootstrap, topic, events=600, keys=20, partitions=2, days=2, seed=1,
                         malformed_rate=0.03, out=devnull)
        tables = Tables(str(root / "warehouse"), pipeline.name)
        run_archive(spark, pipeline, tables, broker.bootstrap, topic,
                    archive_cut(broker.bootstrap, topic, fraction=0.5), out=quiet)
        run_backfill(spark, pipeline, tables, out=quiet)
        run_handoff(spark, pipeline, tables, broker.bootstrap)
        run_stream(spark, pipeline, tables, broker.bootstrap,
                   StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=quiet)
    finally:
        kafka_broker.stop(broker)


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

    spark = build_spark("switchyard-cds", profile="default")  # the UI's too; _workload runs the test profile's way
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
        built = subprocess.run([sys.executable, "-c", "from switchyard.jobs.spark_cds_build import build; build()"],
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
