"""Settings every process of a pipeline must share (SWITCHYARD_MAX_RECORD_BYTES) are recorded with the pipeline by
its first run: a later command whose process has another value refuses in one line before a JVM starts or Kafka is
contacted; a process that leaves it unset takes the recorded value; `switchyard config --record` changes it only
while no record has been classified by it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from deltalake import DeltaTable

from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.io.delta_cas import read
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.language.record_limits import MAX_RECORD_BYTES_ENV
from switchyard.state_handoff.tables import Tables
from tests.support.streams import QUIET

ROOT = Path(__file__).resolve().parents[2]
RECORDED = 2048
BIG = 3000  # above RECORDED, under the default 1 MiB and under another process's 4096
# a master no Spark accepts: a command that started a JVM would fail on it, not refuse in one line
NO_JVM = {"SWITCHYARD_SPARK_MASTER": "no-such-master://", "SWITCHYARD_SPARK_PROFILE": "test"}
DEAD_KAFKA = "127.0.0.1:9"  # nothing listens: a command that contacted Kafka would wait on it, not refuse


def switchyard(*args: str, env: dict[str, str | None] | None = None,
               timeout: float = 600) -> subprocess.CompletedProcess:
    """`switchyard ARGS` in its own process, with `env` over this one's (None: unset)."""
    merged = {**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"}
    for name, text in (env or {}).items():
        if text is None:
            merged.pop(name, None)
        else:
            merged[name] = text
    return subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env=merged, timeout=timeout)


def assert_one_line_refusal(result: subprocess.CompletedProcess, command: str) -> str:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"switchyard {command}: error: "), result.stderr
    return result.stderr


@pytest.fixture(scope="module")
def archived(bootstrap, tmp_path_factory) -> tuple[Tables, str]:
    """A pipeline whose `switchyard archive` ran with SWITCHYARD_MAX_RECORD_BYTES=2048 over a topic holding one
    well-formed event of BIG bytes."""
    topic = f"t.pipeline-settings.{tmp_path_factory.mktemp('x').name}"
    run_generate(bootstrap, topic, events=40, keys=4, partitions=1, days=1, seed=3, malformed_rate=0.0, out=QUIET)
    body = {"event_id": "big-1", "key": "big", "event_time": "2025-12-01T10:00:00Z", "amount": 1, "padding": ""}
    body["padding"] = "x" * (BIG - len(json.dumps(body).encode()))
    produce(bootstrap, topic, [(b"big", json.dumps(body).encode(), 0, None)])
    tables = Tables(str(tmp_path_factory.mktemp("wh")), "demo")
    result = switchyard("archive", "--pipeline", "demo", "--warehouse", tables.warehouse, "--bootstrap", bootstrap,
                        "--topic", topic, "--fraction", "1.0", env={MAX_RECORD_BYTES_ENV: str(RECORDED)})
    assert result.returncode == 0, result.stderr
    return tables, topic


def test_a_command_with_another_record_limit_refuses_before_any_jvm_or_kafka(archived):
    tables, topic = archived
    for command in ("backfill", "stream", "handoff", "rebase"):
        result = switchyard(command, "--pipeline", "demo", "--warehouse", tables.warehouse, "--bootstrap", DEAD_KAFKA,
                            env={MAX_RECORD_BYTES_ENV: "4096", **NO_JVM}, timeout=120)
        stderr = assert_one_line_refusal(result, command)
        assert (f"{MAX_RECORD_BYTES_ENV} is 4096 in this process but pipeline demo records {RECORDED}" in stderr
                and f"unset it or set it to {RECORDED}" in stderr
                and "switchyard config --pipeline demo --record" in stderr), stderr
    archive = switchyard("archive", "--pipeline", "demo", "--warehouse", tables.warehouse, "--bootstrap", DEAD_KAFKA,
                         "--topic", topic, "--fraction", "1.0", env={MAX_RECORD_BYTES_ENV: "4096", **NO_JVM},
                         timeout=120)
    assert f"is 4096 in this process but pipeline demo records {RECORDED}" in assert_one_line_refusal(archive,
                                                                                                       "archive")


def test_a_command_with_the_limit_unset_takes_the_recorded_value(archived):
    tables, _ = archived
    result = switchyard("backfill", "--pipeline", "demo", "--warehouse", tables.warehouse,
                        env={MAX_RECORD_BYTES_ENV: None})
    assert result.returncode == 0, result.stderr
    dead = read(DeltaTable(tables.dead_letter), columns=["reason", "value_bytes"]).to_pylist()
    assert dead == [{"reason": "too_large", "value_bytes": BIG}], dead

    same = switchyard("backfill", "--pipeline", "demo", "--warehouse", tables.warehouse, "--bootstrap", DEAD_KAFKA,
                      "--no-rebase", env={MAX_RECORD_BYTES_ENV: "4096", **NO_JVM}, timeout=120)
    assert f"is 4096 in this process but pipeline demo records {RECORDED}" in assert_one_line_refusal(same,
                                                                                                    "backfill")
    changed = switchyard("config", "--pipeline", "demo", "--warehouse", tables.warehouse, "--record",
                         f"{MAX_RECORD_BYTES_ENV}=4096")
    stderr = assert_one_line_refusal(changed, "config")
    assert f"pipeline demo has classified records by {MAX_RECORD_BYTES_ENV}={RECORDED}" in stderr, stderr


def test_config_records_the_value_of_a_pipeline_that_has_classified_nothing(tmp_path):
    warehouse = str(tmp_path / "wh")
    recorded = switchyard("config", "--pipeline", "demo", "--warehouse", warehouse, "--record",
                          f"{MAX_RECORD_BYTES_ENV}=4096", env={MAX_RECORD_BYTES_ENV: None})
    assert recorded.returncode == 0, recorded.stderr
    assert f"pipeline demo: {MAX_RECORD_BYTES_ENV}=4096 recorded" in recorded.stdout
    shown = switchyard("config", "--pipeline", "demo", "--warehouse", warehouse, env={MAX_RECORD_BYTES_ENV: None})
    assert [MAX_RECORD_BYTES_ENV, "4096", "(recorded", "with", "pipeline", "demo)"] in [
        line.split() for line in shown.stdout.splitlines()], shown.stdout
    refused = switchyard("backfill", "--pipeline", "demo", "--warehouse", warehouse, "--bootstrap", DEAD_KAFKA,
                         env={MAX_RECORD_BYTES_ENV: str(RECORDED), **NO_JVM}, timeout=120)
    assert f"is {RECORDED} in this process but pipeline demo records 4096" in assert_one_line_refusal(refused,
                                                                                                    "backfill")
    bad = switchyard("config", "--pipeline", "demo", "--warehouse", warehouse, "--record", "SWITCHYARD_BOOTSTRAP=x")
    assert "SWITCHYARD_BOOTSTRAP is not recorded with a pipeline" in assert_one_line_refusal(bad, "config")


def test_a_process_serving_several_pipelines_must_give_the_recorded_value_and_first_runs_record_one(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from switchyard.state_handoff.control import pins as pipeline_settings
    from switchyard.state_handoff.errors import UserError

    tables = Tables(str(tmp_path / "wh"), "demo")

    def first_run(text: str) -> str:
        try:
            pipeline_settings.settle(tables, "switchyard backfill", record=True, env={MAX_RECORD_BYTES_ENV: text})
            return text
        except UserError as refused:
            return str(refused)

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(first_run, ["2048", "4096"]))
    won = pipeline_settings.recorded(tables)[MAX_RECORD_BYTES_ENV]
    lost = "4096" if won == "2048" else "2048"
    refused = [outcome for outcome in outcomes if outcome != won]
    assert len(refused) == 1 and f"is {lost} in this process but pipeline demo records {won}" in refused[0], outcomes

    env: dict[str, str] = {}
    with pytest.raises(UserError, match=f"is 1048576 in this process but pipeline demo records {won} .*: set it to "
                                        f"{won} in this process's environment"):
        pipeline_settings.settle(tables, "dagster asset tiles", record=True, adopt=False, env=env)
    assert env == {}
    assert pipeline_settings.settle(tables, "switchyard stream", env=env) == {MAX_RECORD_BYTES_ENV: int(won)}
    assert env == {MAX_RECORD_BYTES_ENV: won}  # unset, it takes the recorded value
