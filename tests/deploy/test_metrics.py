"""Prometheus metrics: the shipped alert rules pass promtool, and a real Prometheus server scraping `switchyard
metrics` sees the archive's margin over Kafka's retention go negative once Kafka deletes past the archive's cut,
with the retention alert firing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from kafka import TopicPartition
from prometheus_client import CollectorRegistry

from switchyard.deploy.local_server import free_port
from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.metrics import PHASES, PipelineCollector
from switchyard.state_handoff.control import kafka_retention
from switchyard.state_handoff.io.kafka_io import admin_client
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.prometheus import RULES, binary, prometheus, scrape, wait_for
from tests.support.streams import QUIET

PIPELINE = get_pipeline("demo")


def test_promtool_checks_the_alert_rules_and_their_tests_fire_them():
    checked = subprocess.run([binary("promtool"), "check", "rules", str(RULES)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 12 rules found" in checked.stdout, checked.stdout
    tested = subprocess.run([binary("promtool"), "test", "rules", RULES.with_suffix(".test.yml").name],
                            capture_output=True, text=True, cwd=RULES.parent)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_the_collector_reports_each_pipeline_and_marks_one_it_cannot_read_down(tmp_path):
    status = {"phase": "caught up", "stream_running": True, "offsets_behind": {"1": 7, "0": 3}, "last_batch_ms": 250,
              "lease": {"epoch": 4, "command": "switchyard stream", "host": "h", "pid": 11},
              "dead_lettered": 2, "late": 0,
              "retention_past_archive": [{"partition": 0}], "lost_offsets": [{"records": 5}, {"records": 6}],
              "input_rows_per_s": None, "latest_at": "2026-01-01T00:00:00+00:00"}

    def status_of(tables):
        if tables.pipeline == "kinds":
            raise OSError("the warehouse is unreachable")
        return status

    registry = CollectorRegistry()
    registry.register(PipelineCollector([Tables(str(tmp_path), "demo"), Tables(str(tmp_path), "kinds")], None,
                                        status_of))
    value = registry.get_sample_value
    assert value("switchyard_up", {"pipeline": "demo"}) == 1 and value("switchyard_up", {"pipeline": "kinds"}) == 0
    assert value("switchyard_phase", {"pipeline": "demo", "phase": "CAUGHT_UP"}) == 1
    assert sum(value("switchyard_phase", {"pipeline": "demo", "phase": p}) for p in PHASES) == 1
    assert value("switchyard_offsets_behind", {"pipeline": "demo", "partition": "1"}) == 7
    assert value("switchyard_last_batch_seconds", {"pipeline": "demo"}) == 0.25
    assert value("switchyard_phase_age_seconds", {"pipeline": "demo"}) > 2.5e7, "in its phase since 2026-01-01"
    holder = {"pipeline": "demo", "command": "switchyard stream", "host": "h", "pid": "11"}
    assert value("switchyard_lease_epoch", holder) == 4
    assert value("switchyard_retention_past_archive_partitions", {"pipeline": "demo"}) == 1
    assert value("switchyard_lost_offsets", {"pipeline": "demo"}) == 11
    assert value("switchyard_input_rows_per_second", {"pipeline": "demo"}) is None  # unknown is absent, not 0
    assert value("switchyard_phase", {"pipeline": "kinds", "phase": "CAUGHT_UP"}) is None


def test_a_metrics_port_out_of_range_is_refused_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "switchyard.jobs.cli", "metrics", "--pipeline", "demo", "--port",
                           "70000", "--warehouse", str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stderr == (
        "switchyard metrics: error: --port must be a port from 0 (any free one) to 65535, not 70000\n"), proc.stderr


def test_prometheus_scrapes_the_archives_margin_over_kafkas_retention_and_fires_the_alert(spark, bootstrap,
                                                                                         topic_name, tmp_path):
    run_generate(bootstrap, topic_name, events=200, keys=8, partitions=2, days=1, seed=5, malformed_rate=0.0, out=QUIET)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    cut = archive_cut(bootstrap, topic_name, fraction=0.5)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, cut, out=lambda *_: None)

    port = free_port()
    exporter = subprocess.Popen([sys.executable, "-m", "switchyard.jobs.cli", "metrics", "--pipeline", "demo",
                                 "--port", str(port), "--warehouse", tables.warehouse, "--bootstrap", bootstrap],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert exporter.stdout.readline().strip() == (
            f"switchyard metrics (demo): metrics at http://127.0.0.1:{port}/metrics")
        page = scrape(f"http://127.0.0.1:{port}/metrics")
        assert page[("switchyard_up", ("pipeline", "demo"))] == 1
        assert page[("switchyard_phase", ("phase", "NOT_STARTED"), ("pipeline", "demo"))] == 1
        assert page[("switchyard_phase", ("phase", "STREAMING"), ("pipeline", "demo"))] == 0
        assert page[("switchyard_stream_running", ("pipeline", "demo"))] == 0
        for p, (lo, hi) in cut.items():  # nothing deleted yet: the margin is the archived offsets
            assert page[("switchyard_archive_retention_margin_offsets", ("partition", str(p)),
                         ("pipeline", "demo"))] == hi - lo

        with prometheus([f"127.0.0.1:{port}"], tmp_path / "prometheus") as query:
            def margins():
                found = query('switchyard_archive_retention_margin_offsets{pipeline="demo"}') or []
                return {int(s["partition"]): s["value"] for s in found}

            assert wait_for(lambda: margins() == {p: hi - lo for p, (lo, hi) in cut.items()},
                            "the first scrape's margins")
            retained_from = {0: cut[0][1] + 3, 1: cut[1][1]}  # partition 0 past the cut, partition 1 exactly at it
            with admin_client(bootstrap) as admin:
                admin.delete_records({TopicPartition(topic_name, p): o for p, o in retained_from.items()})
            wait_for(lambda: margins() == {0: -3, 1: 0}, "the margins after Kafka deleted past the cut")
            assert {m.partition: m.offsets for m in kafka_retention.margins(tables, bootstrap)} == {0: -3, 1: 0}
            assert query('switchyard_retention_past_archive_partitions{pipeline="demo"}')[0]["value"] == 1
            firing = wait_for(lambda: query('ALERTS{alertname="SwitchyardRetentionPastArchive",'
                                            'alertstate="firing"}'), "the retention alert firing")
            assert [(a["pipeline"], a["severity"]) for a in firing] == [("demo", "critical")]
            assert not query('ALERTS{alertname="SwitchyardStreamDown"}')
    finally:
        exporter.send_signal(signal.SIGTERM)
        assert exporter.wait(timeout=30) == 0, exporter.stdout.read()
