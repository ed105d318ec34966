"""The Dagster UI for real: `make ui`'s webserver and daemon on 127.0.0.1, the asset graph in headless Chromium,
and a backfill run launched through the GraphQL API that the daemon dequeues and runs to success."""

import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from jobs.archive import archive_cut, run_archive
from jobs.generate import run_generate
from state_handoff.archive_files import list_archive
from state_handoff.pipelines import get_pipeline
from state_handoff.tables import Tables

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
DAY = "2026-01-01"
LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId status } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
    ... on InvalidSubsetError { message }
    ... on PipelineNotFoundError { message }
  }
}"""
RUN_STATUS = "query Run($id: ID!) { runOrError(runId: $id) { __typename ... on Run { status } } }"
FAILURES = """query Logs($id: ID!) { logsForRun(runId: $id) { ... on EventConnection { events {
  __typename ... on ExecutionStepFailureEvent { stepKey error { message } } } } } }"""
PARTITIONS = '{ assetNodeOrError(assetKey: {path: ["tiles"]}) { ... on AssetNode { partitionKeys } } }'
TILES = """{ assetOrError(assetKey: {path: ["tiles"]}) { ... on Asset {
  assetMaterializations(limit: 5) { partition runId } } } }"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _graphql(base: str, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(f"{base}/graphql", headers={"Content-Type": "application/json"},
                                     data=json.dumps({"query": query, "variables": variables or {}}).encode())
    with urllib.request.urlopen(request, timeout=60) as response:
        body = json.load(response)
    assert "errors" not in body, body["errors"]
    return body["data"]


def _wait_for_server(base: str, process: subprocess.Popen, log: Path, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"make ui's script exited with {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=5) as response:
                return json.load(response)
        except OSError:
            time.sleep(1)
    pytest.fail(f"the webserver did not answer within {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _page_text(url: str, profile: Path) -> str:
    """The page as headless Chromium renders it, once its scripts have run (the DOM, not the HTML served)."""
    shutil.rmtree(profile, ignore_errors=True)
    rendered = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", f"--user-data-dir={profile}",
         "--virtual-time-budget=15000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120)
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    return rendered.stdout


def _texts(dom: str) -> set[str]:
    """Every text node of the rendered page."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S)
    return {t.strip() for t in re.findall(r">([^<>]+)<", dom) if t.strip()}


@pytest.fixture
def warehouse(spark, bootstrap, tmp_path) -> Tables:
    topic = "orchestration.ui"
    run_generate(bootstrap, topic, events=200, keys=8, partitions=1, days=1, seed=5, malformed_rate=0.05,
                 out=io.StringIO())
    tables = Tables(str(tmp_path / "warehouse"), get_pipeline("demo").name)
    run_archive(spark, get_pipeline("demo"), tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=1.0),
                out=lambda *_: None)
    return tables


@pytest.fixture
def ui(warehouse, bootstrap, tmp_path):
    """`make ui` (deploy/dagster_ui.sh) on a free port, with its own instance; stopped with its process group."""
    assert os.access(CHROMIUM, os.X_OK), "Debian's chromium is missing: run deploy/setup.sh (make setup)"
    port = _free_port()
    log = tmp_path / "ui.log"
    env = {**{k: v for k, v in os.environ.items() if k != "SWITCHYARD_FIRST_DAY"},  # partitions from the archive
           "DAGSTER_HOME": str(tmp_path / "dagster_home"), "DAGSTER_PORT": str(port),
           "SWITCHYARD_ENV": "test", "SWITCHYARD_WAREHOUSE": warehouse.warehouse, "SWITCHYARD_BOOTSTRAP": bootstrap}
    process = subprocess.Popen([str(ROOT / "deploy" / "dagster_ui.sh")], cwd=ROOT, env=env, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        yield base, process, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


def test_webserver_shows_the_asset_graph_and_runs_a_launched_backfill(ui, warehouse, tmp_path):
    base, process, log = ui
    info = _wait_for_server(base, process, log)
    assert info["dagster_webserver_version"] == "1.13.27"
    days = _graphql(base, PARTITIONS)["assetNodeOrError"]["partitionKeys"]
    assert days[0] == str(min(f.day for f in list_archive(warehouse.archive))), "partitions begin at the archive"

    backlog = _texts(_page_text(f"{base}/locations/switchyard/asset-groups/backlog", tmp_path / "chromium"))
    assert {"archive", "tiles", "state", "windows", "window_state"} <= backlog, sorted(backlog)[:80]
    switch = _texts(_page_text(f"{base}/locations/switchyard/asset-groups/switch", tmp_path / "chromium"))
    assert {"handoff", "stream"} <= switch, sorted(switch)[:80]

    launched = _graphql(base, LAUNCH, {"executionParams": {
        "selector": {"repositoryLocationName": "switchyard", "repositoryName": "__repository__",
                     "jobName": "backfill_days"},
        "runConfigData": {},
        "executionMetadata": {"tags": [{"key": "dagster/partition", "value": DAY}]},
    }})["launchRun"]
    assert launched["__typename"] == "LaunchRunSuccess", launched
    run_id = launched["run"]["runId"]

    deadline = time.monotonic() + 600
    status = launched["run"]["status"]
    while status not in ("SUCCESS", "FAILURE", "CANCELED") and time.monotonic() < deadline:
        time.sleep(2)
        status = _graphql(base, RUN_STATUS, {"id": run_id})["runOrError"]["status"]
    failures = [e for e in _graphql(base, FAILURES, {"id": run_id})["logsForRun"]["events"]
                if e["__typename"] == "ExecutionStepFailureEvent"]
    assert status == "SUCCESS", (status, failures, log.read_text()[-2000:])

    materialized = _graphql(base, TILES)["assetOrError"]["assetMaterializations"]
    assert {"partition": DAY, "runId": run_id} in materialized
