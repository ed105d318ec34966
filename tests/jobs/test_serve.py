"""`switchyard serve`: the decisions over a given clock, without Spark; then a real service over a handed-off
pipeline, scraped by a real Prometheus server: its stream SIGKILLed is started again, a burst's lag rises and falls
in Prometheus, Dagster's stop job keeps it stopped until a Dagster run asks for the stream (the run ends, the stream
lives on under the service), a rebase shows in its phase and count,
SIGTERM stops it cleanly, and the tables end equal to plain Python over every record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import datetime

import dagster as dg

from switchyard.deploy.local_server import free_port
from switchyard.jobs.serve import Restarts, Service, wanted
from switchyard.orchestration.factory import switchyard_definitions
from switchyard.orchestration.scope import PipelineDeployment
from switchyard.state_handoff.control import handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Phase, Status
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.io.kafka_io import produce
from switchyard.state_handoff.tables import Tables
from tests.jobs.test_rebase import assert_exact_across_handoffs
from tests.jobs.test_rebase_failures import _prepare
from tests.support.cli import cli_here
from tests.support.prometheus import prometheus, scrape, wait_for
from tests.support.streams import latest_total, stream_read, tail_events, wait_until


def test_a_failed_stream_waits_longer_each_time_and_stays_down_after_the_limit():
    restarts = Restarts(limit=4, window_s=100, first_s=1, most_s=3)
    assert [restarts.failed(t) for t in (0, 10, 20)] == [1, 2, 3]  # doubling, at most most_s
    assert restarts.failed(30) is None  # the fourth failure within 100 s
    spaced = Restarts(limit=3, window_s=100)
    assert [spaced.failed(t) for t in (0, 150, 300, 450)] == [1, 1, 1, 1]  # each alone in its window


def test_a_stream_that_could_not_run_for_the_moment_is_retried_and_never_held_down(tmp_path):
    """Exit 75 (Kafka, the registry or the lease unavailable) waits longer each time in a row, up to the most, and
    counts no failure: however long the outage, the service tries again; a failure after it starts the count anew."""
    restarts = Restarts(limit=2, window_s=100, first_s=1, most_s=8)
    assert [restarts.not_now() for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    assert restarts.failures == [] and restarts.failed(0) == 1, "no failure was counted for them"
    assert restarts.not_now() == 1, "a failure ends the run of waits"
    tables = Tables(str(tmp_path), "demo")
    service = Service([tables], "127.0.0.1:1", [], lambda: Restarts(limit=1, first_s=1, most_s=4), out=lambda _: None)
    served = service.served[0]
    for attempt, wait in enumerate((1, 2, 4, 4)):
        service._ended(served, 75, now=100.0 * attempt)
        assert served.held_down_at_seq is None and served.next_start == 100.0 * attempt + wait
    service._ended(served, 2, now=500.0)
    assert served.held_down_at_seq is not None, "a refusal holds it down"


def test_a_stop_between_a_served_streams_restarts_keeps_the_service_from_starting_the_next(tmp_path):
    """No stream runs (the last one died, or a new handoff waits for its first): `switchyard stop` records a stop
    request with no lease, and the service starts none until `switchyard start`; once a stream stopped cleanly there
    is nothing to stop."""
    import pytest

    from switchyard.jobs.stop import stop_stream
    from switchyard.state_handoff.control import requests
    from switchyard.state_handoff.errors import UserError

    tables = Tables(str(tmp_path), "demo")
    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED):
        handoff_log.append(tables, "h1", status)  # a stream started, then its process died
    assert PipelineView.read(tables).phase == Phase.GONE and wanted(PipelineView.read(tables), None) is None
    asked = stop_stream(tables, out=lambda _: None)
    assert isinstance(asked, requests.StopRequest) and asked.lease_id is None
    assert "stopped by a stop request" in wanted(PipelineView.read(tables), None)
    handoff_log.append(tables, "h1", Status.START_REQUESTED)
    assert wanted(PipelineView.read(tables), None) is None, "`switchyard start` lifts it"
    handoff_log.append(tables, "h1", Status.STOPPED)
    with pytest.raises(UserError, match="nothing to stop"):
        stop_stream(tables, out=lambda _: None)


def test_a_redeploy_that_died_after_its_handoff_leaves_the_served_pipeline_streaming(tmp_path):
    """A redeploy stops the stream, hands the changed definition off, then asks for a start: killed between the
    handoff and the start (or its stop timed out and a later run handed off), its own stop request no longer holds
    once its handoff committed, so the service streams the changed definition with no `switchyard start`."""
    from switchyard.state_handoff.control import requests
    from switchyard.state_handoff.control.details import HandoffCommitted

    tables = Tables(str(tmp_path), "demo")
    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED, Status.STREAM_STARTED, Status.STOPPED):
        handoff_log.append(tables, "h1", status)
    requests.ask(tables, requests.StopRequest(handoff_id="h1", requested_by=requests.REDEPLOY, lease_id="l1"))
    asked = requests.ask(tables, requests.RebaseRequest(handoff_id="h1", requested_by=requests.REDEPLOY,
                                                        reason="redeploy",
                                                        redeploy=requests.RedeployPlan("v2", {"version": "v1"})))
    assert "stopped by a stop request" in wanted(PipelineView.read(tables), None), "until its handoff"
    handoff_log.append(tables, "h2", Status.BACKFILL_COMMITTED)
    handoff_log.append(tables, "h2", Status.HANDOFF_COMMITTED, details=HandoffCommitted(request_id=asked.request_id))
    assert wanted(PipelineView.read(tables), None) is None, "the redeploy's stop ended with its handoff"
    requests.ask(tables, requests.StopRequest(handoff_id="h2", requested_by="switchyard stop"))
    assert "stopped by a stop request" in wanted(PipelineView.read(tables), None), "an operator's stop holds"


def test_what_keeps_a_stream_from_starting(tmp_path):
    tables = Tables(str(tmp_path), "demo")
    assert "no handoff yet" in wanted(PipelineView.read(tables), None)
    for status in (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED):
        handoff_log.append(tables, "h1", status)
    assert wanted(PipelineView.read(tables), None) is None
    held = lease.acquire(tables, lease.REBASE)
    try:
        assert "held by `switchyard rebase`" in wanted(PipelineView.read(tables), None)
    finally:
        held.release()
    handoff_log.append(tables, "h1", Status.STOP_REQUESTED)
    assert "stop request" in wanted(PipelineView.read(tables), None)
    start = handoff_log.append(tables, "h1", Status.START_REQUESTED)
    assert wanted(PipelineView.read(tables), None) is None
    assert pipeline_status(tables)["phase"] == Phase.START_REQUESTED
    assert "held down" in wanted(PipelineView.read(tables), held_down_at_seq=start.seq)
    handoff_log.append(tables, "h1", Status.START_REQUESTED)  # a start after the hold lifts it
    assert wanted(PipelineView.read(tables), held_down_at_seq=start.seq) is None


def test_the_shipped_unit_and_image_run_serve_with_arguments_it_takes():
    """The systemd unit's ExecStart and the image's ENTRYPOINT and CMD are `switchyard serve` command lines its
    parser takes (the image itself is built where a container runtime is: none runs here)."""
    import json
    import shlex

    from switchyard.deploy.paths import PROJECT_ROOT
    from switchyard.jobs.cli.parser import build_parser

    folder = PROJECT_ROOT / "deploy" / "service"
    unit = (folder / "switchyard-serve@.service").read_text()
    exec_start = next(line.split("=", 1)[1] for line in unit.splitlines() if line.startswith("ExecStart="))
    words = shlex.split(exec_start.replace("$SWITCHYARD_PIPELINES", "--pipeline orders --pipeline clicks"))
    assert words[0].endswith("/bin/switchyard")
    image = (folder / "Containerfile").read_text()
    entry, cmd = (json.loads(next(line.split(" ", 1)[1] for line in image.splitlines() if line.startswith(word)))
                  for word in ("ENTRYPOINT ", "CMD "))
    assert entry[0] == "switchyard" and all((PROJECT_ROOT / name).is_file() for name in ("constraints.txt",))
    for argv in (words[1:], entry[1:] + cmd):
        args = build_parser().parse_args(argv)
        # the metrics answer on loopback only unless an operator opens them (docs/operating.md)
        assert args.command == "serve" and args.metrics_address == "127.0.0.1" and args.metrics_port == 9464, argv


def _starts(tables: Tables) -> int:
    return sum(e.status == Status.STREAM_STARTED for e in handoff_log.entries(tables))


def test_serve_restarts_a_killed_stream_obeys_stop_and_start_and_drains_on_sigterm(spark, bootstrap, topic_name,
                                                                                  tmp_path):
    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.7)
    start = handoff_log.offsets(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    port, log = free_port(), tmp_path / "serve.log"
    service = subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "serve", "--pipeline", "demo", "--metrics-port", str(port),
         "--stream-arg=--tables-trigger-seconds", "--stream-arg=1", "--stream-arg=--max-offsets-per-trigger",
         "--stream-arg=300", "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"})
    scraper = prometheus([f"127.0.0.1:{port}"], tmp_path / "prometheus")
    query = scraper.__enter__()
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, service, log, "SWITCHED")
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 100, seed=61))
        stream = lease.owner(tables)
        os.killpg(stream.owner_pid, signal.SIGKILL)  # the stream process and its JVM
        wait_until(lambda: _starts(tables) == 2 and lease.owner(tables) is not None
                   and lease.owner(tables).owner_pid != stream.owner_pid, service, log, "the stream started again")
        assert "the stream failed (exit -9); starting it again in 1s" in log.read_text()
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 4), 3000, seed=62))  # a burst
        total = latest_total(bootstrap, topic_name, start)
        wait_until(lambda: stream_read(tables) >= total, service, log, f"{total} tail records read")
        # Prometheus saw the lag rise during the burst and fall back to nothing
        behind = 'sum by (pipeline) (switchyard_offsets_behind{pipeline="demo"})'
        peak = query(f"max_over_time({behind}[5m:1s])")
        assert peak and peak[0]["value"] >= 1000, peak
        wait_for(lambda: (query(behind) or [{"value": -1}])[0]["value"] == 0, "the lag back at 0 in Prometheus")
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
        assert metrics[("switchyard_serve_stream_starts", ("pipeline", "demo"))] == 2
        assert metrics[("switchyard_serve_stream_running", ("pipeline", "demo"))] == 1
        assert metrics[("switchyard_stream_running", ("pipeline", "demo"))] == 1

        # Dagster steers the served stream: its stop job drains it, the service leaves it stopped; the run that
        # asks for the stream (the `stream` asset of a served deployment) ends once the service runs it again
        defs = switchyard_definitions([PipelineDeployment("demo", first_day="2026-01-01", served=True,
                                                          warehouse=tables.warehouse, bootstrap=bootstrap)])
        stopped = defs.resolve_job_def("demo__stop_stream").execute_in_process()
        assert stopped.success and handoff_log.entries(tables)[-1].status == Status.STOPPED
        time.sleep(4)  # the service looks every second: it leaves the stopped stream alone
        assert _starts(tables) == 2 and lease.owner(tables) is None, log.read_text()[-3000:]
        assert "not streaming: stopped by a stop request" in log.read_text()
        stream_key = dg.AssetKey(["demo", "stream"])
        asked = dg.materialize([defs.resolve_assets_def(stream_key)], selection=[stream_key])
        assert asked.success, "the run that asked for the stream ended"
        metadata = asked.asset_materializations_for_node("demo__stream")[0].metadata
        assert metadata["served"].value is True and metadata["started_now"].value is True, metadata
        stream = lease.owner(tables)
        assert _starts(tables) == 3 and stream is not None and stream.command == lease.STREAM
        time.sleep(3)
        assert lease.owner(tables).owner_pid == stream.owner_pid, "the stream lives on after the Dagster run"
        assert service.poll() is None
        wait_until(lambda: handoff_log.latest(tables, Status.CAUGHT_UP) is not None
                   and handoff_log.entries(tables)[-1].status == Status.CAUGHT_UP, service, log, "CAUGHT_UP")

        code, out = cli_here(tables, bootstrap, "rebase", "--timeout", "600")  # the served stream rebases itself
        assert code == 0, out[-3000:]
        # Prometheus saw the phase go through the rebase and back, and the rebase counted
        wait_for(lambda: (query('switchyard_rebases{pipeline="demo"}') or [{"value": 0}])[0]["value"] == 1,
                 "the rebase counted in Prometheus")
        rebasing = query('max_over_time(max(switchyard_phase{pipeline="demo",phase=~"REBASE_REQUESTED|REBASING"})'
                         '[10m:1s])')
        assert rebasing and rebasing[0]["value"] == 1, rebasing
        wait_for(lambda: query('switchyard_phase{pipeline="demo",phase=~"STREAMING|CAUGHT_UP"} == 1'),
                 "the phase back to streaming")
    finally:
        scraper.__exit__(None, None, None)
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert handoff_log.entries(tables)[-1].status == Status.STOPPED  # drained on the way out
    assert lease.owner(tables) is None
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


def test_a_broker_outage_longer_than_a_stream_ends_streaming_again_with_no_start(spark, broker, bootstrap, topic_name,
                                                                                tmp_path):
    """The stream dies while the broker is away (SIGKILLed, as a host's OOM killer would): each stream started meanwhile
    finds Kafka out of reach and exits "not now" (75), which the service retries with its backoff and never counts
    towards holding the stream down; once the broker is back a stream runs again, with no `switchyard start`."""
    from switchyard.deploy import kafka_broker

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.7)
    start = handoff_log.offsets(handoff_log.latest(tables, Status.HANDOFF_COMMITTED))
    log = tmp_path / "serve.log"
    service = subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "serve", "--pipeline", "demo", "--metrics-port", "0",
         "--restarts", "3", "--stream-arg=--tables-trigger-seconds", "--stream-arg=1",
         "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test"})
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, service, log, "SWITCHED")
        stream = lease.owner(tables)
        kafka_broker.stop(broker)
        try:
            os.killpg(stream.owner_pid, signal.SIGKILL)
            wait_until(lambda: log.read_text().count("(exit 75)") >= 3, service, log, "three streams not now",
                       timeout=240)
        finally:
            kafka_broker.start(broker)
        assert "held down" not in log.read_text(), log.read_text()[-3000:]
        wait_until(lambda: (lease.owner(tables) is not None and lease.owner(tables).owner_pid != stream.owner_pid
                            and lease.owner(tables).command == lease.STREAM), service, log, "a stream again")
        assert not any(e.status == Status.START_REQUESTED for e in handoff_log.entries(tables))
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 4), 100, seed=63))
        total = latest_total(bootstrap, topic_name, start)
        wait_until(lambda: stream_read(tables) >= total, service, log, f"{total} tail records read")
    finally:
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=180) == 0, log.read_text()[-3000:]
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


def _serve(tables: Tables, bootstrap: str, log, port: int = 0, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "serve", "--pipeline", "demo", "--metrics-port", str(port),
         "--stream-arg=--tables-trigger-seconds", "--stream-arg=1", "--warehouse", tables.warehouse,
         "--bootstrap", bootstrap],
        stdout=open(log, "w"), stderr=subprocess.STDOUT,
        env={**os.environ, "SWITCHYARD_SPARK_PROFILE": "test", **(env or {})}, start_new_session=True)


def _stopped(service: subprocess.Popen, log) -> None:
    if service.poll() is None:
        service.send_signal(signal.SIGTERM)
        assert service.wait(timeout=180) == 0, log.read_text()[-3000:]


def test_a_paused_rebase_that_keeps_failing_is_held_down_and_alerts_until_a_start(spark, bootstrap, topic_name,
                                                                                 tmp_path):
    """A served stream's rebase fails after its pause at every attempt (an injected failure, as a query's or the
    cluster's would be): the service starts it again with its backoff, each attempt logs FAILED, and at
    PAUSED_FAILURES the stream no longer runs it by itself: the service holds the stream down
    (`switchyard_serve_held_down` 1: SwitchyardServeHeldDown fires) while the phase says FAILED. A service started
    again keeps it down; once the cause is gone, `switchyard start` finishes the rebase at its cut, exactly once."""
    from switchyard.jobs.rebase.requests import PAUSED_FAILURES
    from switchyard.state_handoff.control import details

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.7)
    port, log = free_port(), tmp_path / "serve.log"
    service = _serve(tables, bootstrap, log, port, env={"SWITCHYARD_FAULT": "backfill.after_state:fail"})
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, service, log, "SWITCHED")
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 200, seed=66))
        rebase = subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", "rebase", "--pipeline", "demo",
                                   "--timeout", "900", "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: "held down" in log.read_text(), service, log, "the stream held down", timeout=600)
        rebase.kill()
        failed = [details.of(e) for e in handoff_log.entries(tables) if e.status == Status.FAILED]
        assert len(failed) == PAUSED_FAILURES and all("injected failure at backfill.after_state" in f.reason
                                                      for f in failed), failed
        assert "failed 3 times at its cut" in log.read_text(), log.read_text()[-3000:]
        metrics = scrape(f"http://127.0.0.1:{port}/metrics")
        assert metrics[("switchyard_serve_held_down", ("pipeline", "demo"))] == 1
        assert metrics[("switchyard_serve_stream_running", ("pipeline", "demo"))] == 0
        assert pipeline_status(tables)["phase"] == Phase.FAILED.value
        assert lease.owner(tables) is None and handoff_log.latest(tables, Status.PAUSED) is not None
    finally:
        _stopped(service, log)

    log = tmp_path / "serve-fixed.log"  # the cause gone: a service without the fault
    service = _serve(tables, bootstrap, log)
    try:
        wait_until(lambda: "held down" in log.read_text(), service, log, "the stream refused again by itself")
        code, out = cli_here(tables, bootstrap, "start")
        assert code == 0, out
        wait_until(lambda: [e.status for e in handoff_log.entries(tables)].count(Status.HANDOFF_COMMITTED) == 2
                   and handoff_log.entries(tables)[-1].status in (Status.SWITCHED, Status.CAUGHT_UP), service, log,
                   "the rebase finished at its cut and streaming", timeout=600)
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff_log.latest(tables,
                                                                                            Status.HANDOFF_COMMITTED)))
        wait_until(lambda: stream_read(tables) >= total, service, log, f"{total} records read")
    finally:
        _stopped(service, log)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


def test_a_standby_service_finishes_a_rebase_whose_host_died_and_streams_exactly_once(spark, bootstrap, topic_name,
                                                                                      tmp_path):
    """Two services watch one pipeline: one streams, the other's stream finds the lease taken (not now) and waits.
    The active service and its stream are SIGKILLed mid-rebase (their host gone); the standby takes the lease over
    at once (same host: the owner is dead), finishes the rebase at its recorded cut and streams on, exactly once."""
    from switchyard.state_handoff.control import processes

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=0.7)
    logs = [tmp_path / "serve-a.log", tmp_path / "serve-b.log"]
    services = [_serve(tables, bootstrap, logs[0]), _serve(tables, bootstrap, logs[1])]
    rebase = None
    try:
        wait_until(lambda: handoff_log.latest(tables, Status.SWITCHED) is not None, services[0], logs[0], "SWITCHED")
        wait_until(lambda: sum("(exit 75)" in log.read_text() for log in logs) >= 1, services[1], logs[1],
                   "the standby's stream found the lease taken")
        first = lease.owner(tables)
        active = next(s for s in services if s.pid == processes.stat(first.owner_pid).parent)
        standby = next(s for s in services if s is not active)
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 2, 20), 200, seed=64))
        rebase = subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", "rebase", "--pipeline", "demo",
                                   "--timeout", "600", "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        wait_until(lambda: handoff_log.latest(tables, Status.PAUSED) is not None, active, logs[0], "PAUSED")
        os.killpg(first.owner_pid, signal.SIGKILL)  # the host goes: the stream and its JVM, and the service
        os.killpg(active.pid, signal.SIGKILL)
        active.wait()
        out, _ = rebase.communicate(timeout=600)
        assert rebase.returncode == 0, out[-3000:]
        taken = lease.owner(tables)
        assert taken is not None and taken.owner_pid != first.owner_pid and taken.epoch > first.epoch
        assert processes.stat(taken.owner_pid).parent == standby.pid, "the standby's stream streams"
        assert [e.status for e in handoff_log.entries(tables)].count(Status.HANDOFF_COMMITTED) == 2
        produce(bootstrap, topic_name, tail_events(2, datetime(2026, 1, 3, 4), 100, seed=65))
        total = latest_total(bootstrap, topic_name, handoff_log.offsets(handoff_log.latest(tables, Status.HANDOFF_COMMITTED)))
        wait_until(lambda: stream_read(tables) >= total, standby, logs[1], f"{total} records read")
    finally:
        if rebase is not None and rebase.poll() is None:
            rebase.kill()
        for service in services:
            if service.poll() is None:
                service.send_signal(signal.SIGTERM)
                assert service.wait(timeout=180) == 0, "\n".join(log.read_text()[-2000:] for log in logs)
    assert_exact_across_handoffs(spark, bootstrap, topic_name, tables)


SLOW_PIPELINE = """
import os
import time
from pathlib import Path

from switchyard.state_handoff.language.pipelines import get_pipeline

Path(os.environ["SLOW_MARKER"]).write_text("importing")  # the command line has begun loading its pipelines
time.sleep(8)
PIPELINE = get_pipeline("demo")
"""


def test_a_sigterm_before_the_service_runs_ends_it_cleanly_with_nothing_started(tmp_path):
    """SIGTERM while `serve` is still loading its pipelines (here: a pipeline module that takes 8 s to import) is
    obeyed from the command's start: exit 0, no stream started; the default action would end it with -15."""
    site, marker = tmp_path / "site", tmp_path / "importing"
    site.mkdir()
    (site / "slow_pipeline.py").write_text(SLOW_PIPELINE)
    log = tmp_path / "serve.log"
    service = subprocess.Popen(
        [sys.executable, "-m", "switchyard.jobs.cli", "serve", "--pipeline", "slow_pipeline:PIPELINE",
         "--metrics-port", "0", "--warehouse", str(tmp_path / "wh"), "--bootstrap", "127.0.0.1:9"],
        stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True,
        env={**os.environ, "PYTHONPATH": f"{site}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
             "SLOW_MARKER": str(marker)})
    deadline = time.monotonic() + 60
    while not marker.exists() and service.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert marker.exists(), log.read_text()
    service.send_signal(signal.SIGTERM)
    assert service.wait(timeout=60) == 0, log.read_text()[-2000:]
    assert "stream started" not in log.read_text()
