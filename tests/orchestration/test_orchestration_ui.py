"""The Dagster UI in a real browser: `make ui`'s webserver and daemon on 127.0.0.1 and headless Chromium (Playwright)
through the asset graph with the stream's checks, a two-day backfill launched from the partitions dialog and run by
the daemon, the stream's plots from the sensor's observations, and a red health check once the stream is killed.
Screenshots land in test-artifacts/ui/."""

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import pytest
from playwright.sync_api import Page, expect, sync_playwright

from switchyard.deploy.local_server import free_port
from switchyard.jobs.backfill import commit_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.state_handoff.control import handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.io.archive_files import list_archive
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.tables import Tables
from tests.support.live_stream import PIPELINE, archived_topic, live_events, read_past, tick
from tests.support.streams import start_stream, wait_until

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "ui"
TOPIC = "orchestration.ui"
NOON = datetime(2026, 1, 1, 12, tzinfo=timezone.utc)
STREAM_CHECKS = ("stream_process_alive", "stream_caught_up", "stream_update_latency", "stream_reconciled",
                 "stream_is_healthy")
WAIT_MS = 60_000


def _wait_for_server(base: str, process: subprocess.Popen, log: Path, timeout: float = 240) -> dict:
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


def _shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"))


@pytest.fixture
def warehouse(spark, bootstrap, tmp_path) -> Tables:
    """An archive of two days (noon to noon), nothing backfilled yet: the partitions dialog has something to do."""
    return archived_topic(spark, bootstrap, TOPIC, str(tmp_path / "warehouse"), seed=5, start=NOON)


@pytest.fixture
def ui(warehouse, bootstrap, tmp_path, monkeypatch):
    """`make ui` (deploy/dagster_ui.sh) on a free port with its own instance, which this process opens too;
    stopped with its process group (webserver, daemon, their code servers and the runs they launched)."""
    assert os.access(CHROMIUM, os.X_OK), "Debian's chromium is missing: run deploy/setup.sh (make setup)"
    port, home, log = free_port(), tmp_path / "dagster_home", tmp_path / "ui.log"
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_PORT": str(port), "SWITCHYARD_ENV": "test",
           "SWITCHYARD_WAREHOUSE": warehouse.warehouse, "SWITCHYARD_BOOTSTRAP": bootstrap}
    process = subprocess.Popen([str(ROOT / "deploy" / "dagster_ui.sh")], cwd=ROOT, env=env, stdout=open(log, "w"),
                               stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        info = _wait_for_server(base, process, log)
        assert info["dagster_webserver_version"] == dg.__version__
        monkeypatch.setenv("DAGSTER_HOME", str(home))
        with dg.DagsterInstance.get() as instance:
            yield base, instance, log
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)


@pytest.fixture
def page():
    """Debian's Chromium, headless, driven by Playwright; the last page is kept as a screenshot, also on failure."""
    shutil.rmtree(ARTIFACTS, ignore_errors=True)  # this run's screenshots only
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900}, timezone_id="UTC")
            page.set_default_timeout(WAIT_MS)
            expect.set_options(timeout=WAIT_MS)  # a page of a loaded machine's webserver takes seconds to fill
            yield page
            _shot(page, "last")
        finally:
            browser.close()


def _record(instance: dg.DagsterInstance, result) -> None:
    """What the daemon does with a sensor's result: its observations and check evaluations into the instance."""
    for event in result.asset_events:
        instance.report_runless_asset_event(event)


def _wait_for_backfill(instance: dg.DagsterInstance, log: Path, timeout: float = 900):
    """The one backfill the dialog launched, once the daemon has run it to an end."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        backfills = instance.get_backfills()
        if backfills and backfills[0].status.value not in ("REQUESTED", "CANCELING", "FAILING"):
            assert len(backfills) == 1, [b.backfill_id for b in backfills]
            return backfills[0]
        time.sleep(3)
    pytest.fail(f"the backfill did not finish within {timeout:.0f}s:\n{log.read_text()[-3000:]}")


def _checks_summary(page: Page, base: str):
    """The stream node's asset-checks row in its lineage graph (handoff -> stream, few enough nodes to be drawn in
    full: "n / 5 Passed", its icon)."""
    page.goto(f"{base}/assets/demo/stream?view=lineage")
    expect(page.get_by_text("handoff", exact=True).first).to_be_visible()
    return page.locator('a[href="/assets/demo/stream?view=checks"]:not([role="tab"])')


def _check_row(page: Page, name: str):
    """A check in the stream's Checks tab: its name and latest status."""
    return page.locator("[class*='checkRow']").filter(has_text=name)


def _until(page: Page, assertion, timeout: float = 120) -> None:
    """Reload until `assertion` holds: the daemon's own sensor ticks into the same instance every 30 s."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return assertion()
        except AssertionError:
            if time.monotonic() > deadline:
                raise
            page.reload()


@pytest.mark.timeout(1800)  # a backfill run and a stream start, each a JVM, on a loaded two-core machine
def test_the_ui_shows_a_backfill_a_live_stream_and_its_death(ui, warehouse, spark, bootstrap, page, tmp_path):
    base, instance, log = ui
    days = sorted({str(f.day) for f in list_archive(warehouse.archive)})
    assert days == ["2026-01-01", "2026-01-02"], f"the test archive should span two days, not {days}"

    # one code location, two pipelines: each its own group of the same seven assets
    page.goto(f"{base}/asset-groups")
    for group in ("demo", "kinds"):
        expect(page.get_by_text(group, exact=True).first).to_be_visible()
    _shot(page, "00-two-pipelines")
    page.goto(f"{base}/locations/switchyard/asset-groups/kinds")
    for name in ("archive", "tiles", "state", "windows", "window_state", "handoff", "stream"):
        expect(page.get_by_text(name, exact=True).first).to_be_visible()

    # the demo group's graph: the stream with its five checks, none evaluated yet
    checks = _checks_summary(page, base)
    expect(page.get_by_text("stream", exact=True).first).to_be_visible()
    expect(checks).to_have_text("0 / 5 Passed")
    _shot(page, "01-asset-graph")

    # a ranged backfill of both days from the partitions dialog; the daemon launches its run
    page.goto(f"{base}/assets/demo/tiles")
    page.locator("button").filter(has_text=re.compile("^Materialize")).first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog.get_by_text(re.compile("^Launch runs to materialize demo / tiles$"))).to_be_visible()
    # the dialog opens on the last 90 days: the archive's days are older
    narrowed, all_time = dialog.get_by_text("Show all partitions"), dialog.locator("button", has_text="All time")
    expect(narrowed.or_(all_time)).to_be_visible()
    if narrowed.is_visible():
        narrowed.click()
    expect(all_time).to_be_visible()
    days_box = dialog.get_by_role("textbox").first
    days_box.fill(f"[{days[0]}...{days[1]}]")
    days_box.press("Enter")
    expect(dialog.get_by_text("2 partitions", exact=True)).to_be_visible()
    expect(dialog.get_by_text("Backfills all partitions in a single run.")).to_be_visible()
    _shot(page, "02-partitions-dialog")
    dialog.get_by_role("button", name="Launch backfill").click()
    expect(dialog).to_have_count(0)
    backfill = _wait_for_backfill(instance, log)
    runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/backfill": backfill.backfill_id}))
    assert backfill.status.value in ("COMPLETED", "COMPLETED_SUCCESS"), (backfill.status, log.read_text()[-3000:])
    assert [r.status for r in runs] == [dg.DagsterRunStatus.SUCCESS], "one run for both days (single-run policy)"
    assert (runs[0].tags["dagster/asset_partition_range_start"], runs[0].tags["dagster/asset_partition_range_end"]) \
        == (days[0], days[1])
    page.goto(f"{base}/runs/b/{backfill.backfill_id}")
    expect(page.get_by_text(f"{days[0]}...{days[1]}", exact=True)).to_be_visible()
    expect(page.get_by_text("Succeeded", exact=True).first).to_be_visible()
    expect(page.get_by_role("link", name=re.compile("tiles$")).first).to_be_visible()
    expect(page.get_by_text("100% completed", exact=True)).to_be_visible()
    _shot(page, "03-backfill-completed")

    # the switch and a live stream; the sensor's observations of it recorded into the instance
    commit_backfill(spark, PIPELINE, warehouse, out=lambda *_: None)
    run_handoff(spark, PIPELINE, warehouse, bootstrap)
    stream_log = tmp_path / "stream.log"
    process = start_stream(warehouse, bootstrap, stream_log)
    try:
        wait_until(lambda: handoff_log.latest(warehouse, Status.CAUGHT_UP) is not None, process,
                   stream_log, "CAUGHT_UP", timeout=900)
        cursor = None
        for batch in range(2):
            produce(bootstrap, TOPIC, live_events(50, f"live{batch}"))
            sent_at = time.time()
            wait_until(lambda: read_past(warehouse, sent_at), process, stream_log, "the live events streamed",
                       timeout=600)
            result = tick(warehouse, bootstrap, cursor)
            _record(instance, result)
            cursor = result.cursor

        page.goto(f"{base}/assets/demo/stream?view=overview")
        page.get_by_role("button", name="Plots").click()
        for series in ("offsets_behind", "input_rate", "processed_rate", "update_latency_p99_s"):
            chart = page.locator(f"xpath=//span[text()='{series}']/ancestor::div[.//canvas][1]//canvas")
            expect(chart).to_be_visible()
        page.get_by_text("Metadata", exact=True).evaluate("heading => heading.scrollIntoView({block: 'start'})")
        _shot(page, "04-stream-plots")

        page.goto(f"{base}/assets/demo/stream?view=checks")
        for name in STREAM_CHECKS:
            expect(_check_row(page, name)).to_contain_text("Succeeded")

        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=60)
        _record(instance, tick(warehouse, bootstrap, cursor))
    finally:
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=60)

    page.goto(f"{base}/assets/demo/stream?view=checks")
    _until(page, lambda: expect(_check_row(page, "stream_process_alive")).to_contain_text("Failed", timeout=5_000))
    expect(_check_row(page, "stream_is_healthy")).to_contain_text("Failed")
    _check_row(page, "stream_process_alive").click()
    expect(page.get_by_text("the stream process is gone without a clean stop").first).to_be_visible()
    _shot(page, "05-stream-check-failed")

    checks = _checks_summary(page, base)
    expect(checks).to_have_text(re.compile(r"^[0-3] / 5 Passed$"))
    expect(checks.get_by_role("img", name="close")).to_be_visible()
    _shot(page, "06-asset-graph-failed-check")
