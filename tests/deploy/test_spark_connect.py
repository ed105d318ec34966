"""The batch commands over Spark Connect: `switchyard archive`, `backfill`, `handoff` and `status` run with
SPARK_REMOTE naming a local Spark Connect server, start no JVM of their own, and the tables equal the oracle's; the
stream and serve, which need a classic session, are refused in one line before any work."""

from __future__ import annotations

import os

import pytest

from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import run_stream
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows
from tests.support.spark_cluster import run_cli

PIPELINE = get_pipeline("demo")


def test_archive_backfill_handoff_and_status_run_on_a_spark_connect_server(spark_connect, spark, bootstrap,
                                                                            topic_name, tmp_path):
    run_generate(bootstrap, topic_name, events=300, keys=10, partitions=2, days=2, seed=67, malformed_rate=0.02,
                 out=open(os.devnull, "w"))
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    java = tmp_path / "no-java" / "bin" / "java"  # what a command starting a JVM of its own would run
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\ntouch {tmp_path / 'java-asked'}\nexit 1\n")
    java.chmod(0o755)
    env = spark_connect.env(SWITCHYARD_BOOTSTRAP=bootstrap, SWITCHYARD_WAREHOUSE=tables.warehouse,
                            JAVA_HOME=str(java.parent.parent))
    for step in (["archive", "--topic", topic_name, "--fraction", "1.0"], ["backfill"], ["handoff"], ["status"]):
        done = run_cli([*step, "--pipeline", PIPELINE.name], env)
        assert done.returncode == 0, (step, (done.stdout + done.stderr)[-3000:])
    assert done.stdout.startswith(f"pipeline {PIPELINE.name}: "), done.stdout
    assert not (tmp_path / "java-asked").exists(), "the server's driver ran the Spark work, no JVM of the commands'"

    expected = oracle.backlog(oracle.read_topic(bootstrap, topic_name))
    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)} \
        == expected.dead_letter

    # a committed handoff: a stream could start here, and is refused before it takes the lease or logs a line
    logged = handoff_log.entries(tables)
    for command in ("stream", "serve"):
        done = run_cli([command, "--pipeline", PIPELINE.name], env)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        error = done.stderr.strip().splitlines()
        assert len(error) == 1 and error[0].startswith(f"switchyard {command}: error: the stream needs a "
                                                       "classic Spark session"), error
        assert "SPARK_REMOTE" in error[0] and "spark-submit" in error[0]
    assert len(handoff_log.entries(tables)) == len(logged), "refused before any work"

    # a library caller handing the stream a Spark Connect session of its own: refused the same way
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    remote = ConnectSession.builder.remote(spark_connect.server.url).create()
    try:
        with pytest.raises(UserError, match="^the stream needs a classic Spark session"):
            run_stream(remote, PIPELINE, tables, bootstrap)
    finally:
        remote.stop()
    assert len(handoff_log.entries(tables)) == len(logged), "refused before any work"
