"""The same commands on a Spark standalone cluster (a master and two workers on 127.0.0.1): executors run the code
the driver ships, not this checkout; the backlog phase on the cluster matches the oracle; stop leaves no JVM."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap

import pytest

from switchyard.deploy import spark_cluster as standalone
from switchyard.deploy.paths import PROJECT_ROOT
from switchyard.jobs.archive import archive_cut
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches, assert_windows_match, rows
from tests.support.spark_cluster import processes_of, run_cli

PIPELINE = get_pipeline("demo")

# Runs in a driver on the cluster. Each task forgets the project's modules and the editable install's finder (the
# .venv's .pth that maps them to this checkout), then imports them twice: without the shipped zip on its path
# (must fail), and with it (must load from the zip in the executor's own folder).
_PROBE = textwrap.dedent("""
    import json, os, sys
    from switchyard.deploy.spark import build_spark
    NAMES = ("SPARK_LOCAL_IP", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")
    before = {name: os.environ.get(name) for name in NAMES}

    def probe(_):
        import importlib, os, sys, time
        sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in getattr(f, "__name__", "")]
        for name in [m for m in sys.modules if m.split(".")[0] == "switchyard"]:
            del sys.modules[name]
        shipped = [p for p in sys.path if os.path.basename(p).startswith("switchyard-") and p.endswith(".zip")]
        path = sys.path[:]
        sys.path[:] = [p for p in path if p not in shipped]
        importlib.invalidate_caches()
        try:
            importlib.import_module("switchyard.state_handoff.language.spec")
            without_zip = "imported"
        except ModuleNotFoundError as err:
            without_zip = str(err)
        sys.path[:] = path
        importlib.invalidate_caches()
        pipelines = importlib.import_module("switchyard.state_handoff.language.pipelines")
        aggregation = importlib.import_module("switchyard.jobs.aggregation")
        time.sleep(0.5)  # keep each executor busy long enough for the other to take tasks too
        yield {"cwd": os.getcwd(), "shipped": shipped, "without_zip": without_zip,
               "pipelines": os.path.abspath(pipelines.__file__), "aggregation": os.path.abspath(aggregation.__file__),
               "demo_key": pipelines.get_pipeline("demo").key, "python": sys.executable}

    spark = build_spark("switchyard-probe", extra_conf={"spark.scheduler.minRegisteredResourcesRatio": "1.0",
                                                        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s"})
    found = spark.sparkContext.parallelize(range(8), 8).mapPartitions(probe).collect()
    after = {name: os.environ.get(name) for name in NAMES}
    print(json.dumps({"tasks": found, "driver_path": sys.path, "environment": [before, after],
                      "python": sys.executable}))
    spark.stop()
""")


def test_executors_run_the_shipped_code_not_the_checkout(spark_cluster):
    done = subprocess.run([sys.executable, "-c", _PROBE], env=spark_cluster.env(), cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    tasks = report["tasks"]
    worker_1 = str(spark_cluster.cluster.worker(1).work_dir)
    assert {t["cwd"].startswith(worker_1) for t in tasks} == {True, False}, "both workers ran tasks"
    assert {t["cwd"].startswith(str(spark_cluster.elsewhere)) for t in tasks} == {True, False}
    for task in tasks:
        assert len(task["shipped"]) == 1, task
        zip_in_cwd = f"{task['cwd']}/{task['shipped'][0].split('/')[-1]}"
        assert "No module named 'switchyard'" in task["without_zip"], task
        assert task["pipelines"] == f"{zip_in_cwd}/switchyard/state_handoff/language/pipelines/__init__.py", task
        assert task["aggregation"] == f"{zip_in_cwd}/switchyard/jobs/aggregation.py", task
        assert task["demo_key"] == PIPELINE.key
        assert task["python"] == report["python"], "the workers run the driver's interpreter"
    before, after = report["environment"]
    assert after == before, "a session built leaves the process's environment as it was"
    assert not any("/switchyard-" in p for p in report["driver_path"]), "the driver imports from its checkout"


@pytest.mark.extended  # test_scale_out runs the whole switch on this cluster
@pytest.mark.timeout(1800)  # a few minutes on a quiet machine; each step starts a driver and executors
def test_backlog_on_the_cluster_matches_the_oracle(spark_cluster, bootstrap, spark, topic_name, tmp_path):
    env = spark_cluster.env(SWITCHYARD_BOOTSTRAP=bootstrap, SWITCHYARD_WAREHOUSE=str(tmp_path / "warehouse"))
    steps = [["dev", "generate", "--topic", topic_name, "--events", "1500", "--keys", "30", "--partitions", "2",
              "--days", "1", "--seed", "12", "--malformed-rate", "0.04"],
             ["archive", "--pipeline", PIPELINE.name, "--topic", topic_name, "--fraction", "0.8"],
             ["backfill", "--pipeline", PIPELINE.name]]
    for step in steps:
        done = run_cli(step, env, timeout=900)
        assert done.returncode == 0, (step, done.stderr[-3000:])

    cut = archive_cut(bootstrap, topic_name, fraction=0.8)
    archived = [r for r in oracle.read_topic(bootstrap, topic_name) if r.offset < cut[r.partition][1]]
    expected = oracle.backlog(archived)
    tables = Tables(str(tmp_path / "warehouse"), PIPELINE.name)
    assert_state_matches(spark, tables, expected)
    assert_windows_match(spark, tables.windows, expected.final_windows())
    assert_windows_match(spark, tables.window_state, expected.open_windows())
    assert {(r.kafka_partition, r.kafka_offset): r.reason for r in rows(spark, tables.dead_letter)} \
        == expected.dead_letter

    ran_on_cluster = {app["name"] for app in standalone.master_state(spark_cluster.cluster)["completedapps"]}
    assert {"switchyard-archive", "switchyard-backfill"} <= ran_on_cluster


def test_start_refuses_a_port_in_use():
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        done = run_cli(["dev", "spark", "start", "--port", str(port)], dict(os.environ), timeout=60)
    shutil.rmtree(standalone.Cluster.at(port).home, ignore_errors=True)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"switchyard dev spark: error: port {port} on 127.0.0.1 is already in use: "
                                   "stop what holds it or pick another --port")


def test_start_is_idempotent_and_stop_leaves_no_jvm(spark_cluster):
    port = str(spark_cluster.cluster.port)
    env = spark_cluster.env()
    before = run_cli(["dev", "spark", "status", "--port", port], env, timeout=60)
    assert before.returncode == 0, before.stdout + before.stderr
    assert before.stdout.count("ALIVE") == 2 and "2 worker(s) running" in before.stdout

    again = run_cli(["dev", "spark", "start", "--port", port], env, timeout=60)
    assert again.returncode == 0
    assert "already running" in again.stdout and "2 worker(s) already running" in again.stdout
    assert f"master URL: {spark_cluster.master_url}" in again.stdout

    stopped = run_cli(["dev", "spark", "stop", "--port", port], env, timeout=120)
    assert stopped.returncode == 0, stopped.stderr
    assert "worker-1" in stopped.stdout and "worker-2" in stopped.stdout and "master" in stopped.stdout
    assert processes_of(spark_cluster.cluster, spark_cluster.elsewhere) == []

    after = run_cli(["dev", "spark", "status", "--port", port], env, timeout=60)
    assert after.returncode == 1 and "is not running" in after.stdout
