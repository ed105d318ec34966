"""The session switchyard runs on: the one the process already has, as it is; else one built from the command's
settings over the platform's over switchyard's own; under `spark-submit`, what spark-submit was given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from switchyard.deploy import spark as deploy_spark
from switchyard.state_handoff.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def test_a_session_the_process_already_has_is_used_as_it_is(spark):
    """A notebook's or the platform's session: build_spark returns it without applying switchyard's settings or a
    profile's over the owner's."""
    spark.conf.set("spark.sql.shuffle.partitions", "3")
    try:
        again = deploy_spark.build_spark("another", profile="default",
                                         extra_conf={"spark.sql.shuffle.partitions": "9"})
        assert again is spark
        assert spark.conf.get("spark.sql.shuffle.partitions") == "3"
        assert spark.conf.get("spark.databricks.delta.snapshotPartitions") == "2"  # the test profile's, not default's
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", "2")


def test_a_session_in_another_time_zone_is_refused_in_one_line(spark):
    spark.conf.set("spark.sql.session.timeZone", "America/New_York")
    try:
        with pytest.raises(UserError, match=r"^the session's spark.sql.session.timeZone is America/New_York: .* "
                                            r"set spark.sql.session.timeZone=UTC"):
            deploy_spark.build_spark("another")
    finally:
        spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_the_commands_settings_win_over_the_platforms_and_the_platforms_over_switchyards(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text("# the platform's\nspark.master  spark://cluster:7077\n"
                                                  "spark.sql.shuffle.partitions=5\nspark.ui.enabled: true\n")
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("PYSPARK_SUBMIT_ARGS", "--packages org.example:lib:1.0 --conf spark.driver.memory=3g "
                                              "pyspark-shell")
    conf = deploy_spark.session_conf("app", "test", {"spark.sql.shuffle.partitions": "7"})
    assert conf["spark.sql.shuffle.partitions"] == "7", "the command's --conf over everything"
    given = {"spark.master", "spark.ui.enabled", "spark.driver.memory"}
    assert not given & set(conf), "what the platform gives is left to the platform"
    assert conf["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension", "switchyard's own otherwise"
    assert "spark.jars" in conf, "--packages names other artifacts; switchyard's jars still come"
    assert conf["spark.hadoop.parquet.hadoop.vectored.io.enabled"] == "false", "Parquet's vectored reads off"
    on = deploy_spark.session_conf("app", "test", {"spark.hadoop.parquet.hadoop.vectored.io.enabled": "true"})
    assert on["spark.hadoop.parquet.hadoop.vectored.io.enabled"] == "true", "and back on by the command's --conf"

    (tmp_path / "spark-defaults.conf").write_text("spark.sql.session.timeZone Europe/Paris\n")
    with pytest.raises(UserError, match=r"^the given spark.sql.session.timeZone is Europe/Paris"):
        deploy_spark.session_conf("app", "test")


def test_a_spark_setting_not_named_spark_is_refused_before_any_work(tmp_path):
    done = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "backfill", "--pipeline", "demo",
                           "--warehouse", str(tmp_path), "--conf", "shuffle.partitions=3"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "argument --conf: expected spark.KEY=VALUE, got 'shuffle.partitions=3'" in done.stderr
    assert not (tmp_path / "demo").exists(), "nothing written"


def test_a_stream_under_spark_connect_is_refused_in_one_line_before_any_work(tmp_path):
    """The stream needs a classic session (foreachBatch state, listeners, scheduler pools): with SPARK_REMOTE set,
    `switchyard stream` is refused in one line saying where to run it, before it reaches any server. The batch
    commands run over Spark Connect: tests/deploy/test_spark_connect.py."""
    done = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "stream", "--pipeline", "demo",
                           "--warehouse", str(tmp_path / "wh")], capture_output=True, text=True, cwd=ROOT,
                          timeout=120, env={**os.environ, "SPARK_REMOTE": "sc://127.0.0.1:15002"})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith("switchyard stream: error: the stream needs a classic Spark session"), error
    assert "SPARK_REMOTE" in error and "spark-submit" in error
    assert not (tmp_path / "wh").exists(), "refused before any work"


def _environment(event_log: Path) -> dict[str, str]:
    """The Spark properties a driver ran with, from its event log's environment event (a rolling log is a folder
    of event files)."""
    files = sorted(event_log.glob("events_*")) if event_log.is_dir() else [event_log]
    for line in "\n".join(f.read_text() for f in files).splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerEnvironmentUpdate":
            return event["Spark Properties"] if isinstance(event["Spark Properties"], dict) else \
                dict(event["Spark Properties"])
    raise AssertionError(f"no environment event in {event_log}")


def test_under_spark_submit_its_master_and_confs_win(spark, bootstrap, topic_name, tmp_path):
    """`spark-submit --master local[2] --conf ...` running `switchyard backfill` and `switchyard handoff`: each
    session runs with spark-submit's master and settings (its event log says so), and the state equals the
    oracle's."""
    from switchyard.jobs.archive import archive_cut, run_archive
    from switchyard.jobs.inputs.generate import run_generate
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from switchyard.state_handoff.tables import Tables
    from tests.support import oracle
    from tests.support.compare import rows

    pipeline = get_pipeline("demo")
    run_generate(bootstrap, topic_name, events=300, keys=10, partitions=2, days=2, seed=61, malformed_rate=0.02,
                 out=open(os.devnull, "w"))
    tables = Tables(str(tmp_path / "wh"), pipeline.name)
    run_archive(spark, pipeline, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=1.0),
                out=lambda *_: None)
    events = tmp_path / "events"
    events.mkdir()
    jars = deploy_spark.spark_extra_jars()
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable,
           "SWITCHYARD_SPARK_PROFILE": "test"}
    for command in ("backfill", "handoff"):
        done = subprocess.run(
            [str(Path(sys.executable).with_name("spark-submit")), "--master", "local[2]",
             "--jars", ",".join(map(str, jars)), "--conf", "spark.eventLog.enabled=true",
             "--conf", f"spark.eventLog.dir={events}", "--conf", "spark.eventLog.compress=false",
             "--conf", "spark.sql.shuffle.partitions=3",
             "--conf", "spark.switchyard.test.probe=given", "--conf", "spark.driver.bindAddress=127.0.0.1",
             "--conf", "spark.driver.host=127.0.0.1",
             str(ROOT / "jobs" / "cli" / "__main__.py"), command, "--pipeline", pipeline.name,
             "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
            capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    logs = sorted(events.iterdir())
    assert len(logs) == 2, logs
    for log in logs:
        properties = _environment(log)
        assert properties["spark.master"] == "local[2]", properties["spark.master"]
        assert properties["spark.sql.shuffle.partitions"] == "3"
        assert properties["spark.switchyard.test.probe"] == "given"
        assert properties["spark.sql.extensions"] == "io.delta.sql.DeltaSparkSessionExtension"
    expected = oracle.backlog(oracle.read_topic(bootstrap, topic_name)).state
    state = {r.key: (r.event_count, r.amount_min, r.amount_max) for r in rows(spark, tables.state)}
    assert state == {k: (s.event_count, s.amount_min, s.amount_max) for k, s in expected.items()}


SECRETS_SEEN = """
import json, os
from switchyard.deploy.spark import build_spark
spark = build_spark("secrets", extra_conf={"spark.hadoop.fs.s3a.secret.key": "s3cr3t-in-conf",
                                          "spark.executorEnv.AWS_SECRET_ACCESS_KEY": "s3cr3t-in-env"})
seen = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    if int(pid) == os.getpid():  # this script's own text names them
        continue
    try:
        line = open(f"/proc/{pid}/cmdline", "rb").read().decode(errors="replace").replace("\\0", " ")
    except OSError:
        continue
    seen += [word for word in ("hunter2-in-options", "s3cr3t-in-conf", "s3cr3t-in-env") if word in line]
print(json.dumps({"seen": seen, "conf": spark.conf.get("spark.hadoop.fs.s3a.secret.key"),
                  "env": spark.conf.get("spark.executorEnv.AWS_SECRET_ACCESS_KEY"),
                  "property": spark._jvm.java.lang.System.getProperty("javax.net.ssl.keyStorePassword")}))
"""


def test_no_secret_of_the_session_shows_on_any_process_command_line(tmp_path):
    """A keystore password in SWITCHYARD_JVM_OPTIONS, a secret Spark setting and an executor's AWS secret reach the
    JVM (the property set, the settings in the session) and show on no process's command line (`ps`): the settings
    are given to the JVM once it runs, the driver's secret options through an argument file it reads at start."""
    env = {**os.environ, "SWITCHYARD_JVM_OPTIONS": "-Djavax.net.ssl.keyStorePassword=hunter2-in-options",
           "SWITCHYARD_SPARK_PROFILE": "test"}
    done = subprocess.run([sys.executable, "-c", SECRETS_SEEN], capture_output=True, text=True, cwd=tmp_path,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert shown == {"seen": [], "conf": "s3cr3t-in-conf", "env": "s3cr3t-in-env", "property": "hunter2-in-options"}
    assert "hunter2" not in done.stderr and "s3cr3t" not in done.stderr, "nor in what the JVM printed"
