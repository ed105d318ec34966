"""The command line's log (jobs/log.py): text lines exactly as the commands print them, JSON lines with their
fields, -q and -v, results printed whatever the log does, and no logging configured by importing switchyard."""

from __future__ import annotations

import io
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path

from switchyard.jobs import log
from switchyard.state_handoff.control.pins import PIPELINE_WIDE

ROOT = Path(__file__).resolve().parents[2]
SWITCHYARD = Path(sys.executable).parent / "switchyard"  # the installed command, beside this interpreter
RECORD = "SWITCHYARD_MAX_RECORD_BYTES=2048"
RECORDED = "pipeline demo: SWITCHYARD_MAX_RECORD_BYTES=2048 recorded"


def _switchyard(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    # a pipeline-wide setting an earlier test's command adopted into this process's environment would override
    # what these commands record and read back
    left_out = ("SWITCHYARD_PIPELINE", "SWITCHYARD_LOG_FORMAT", *PIPELINE_WIDE)
    environment = {k: v for k, v in os.environ.items() if k not in left_out}
    return subprocess.run([str(SWITCHYARD), *args], capture_output=True, text=True, cwd=ROOT,
                          env={**environment, **(env or {})}, timeout=120)


def _record(warehouse: Path, *options: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`switchyard config --record`: a command that logs one line, with delta-rs and no JVM."""
    return _switchyard(*options, "config", "--pipeline", "demo", "--warehouse", str(warehouse), "--record", RECORD,
                       env=env)


def _json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


def _utc(ts: str) -> datetime:
    when = datetime.fromisoformat(ts)
    assert when.utcoffset() == timedelta(0), ts
    return when


def test_a_log_line_in_text_is_the_message_alone_on_stdout(tmp_path):
    done = _record(tmp_path / "wh")
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == (RECORDED + "\n", "")


def test_a_log_line_in_json_is_one_object_with_its_fields(tmp_path):
    started = datetime.now().astimezone()
    done = _record(tmp_path / "wh", "--log-format", "json")
    assert done.returncode == 0 and done.stderr == "", done.stderr
    [entry] = _json_lines(done.stdout)
    assert {k: v for k, v in entry.items() if k != "ts"} == {
        "level": "INFO", "logger": "switchyard.jobs.cli.pipeline", "message": RECORDED, "pipeline": "demo",
        "command": "switchyard config"}
    assert started - timedelta(seconds=1) <= _utc(entry["ts"]) <= datetime.now().astimezone()


def test_the_format_comes_from_the_environment_and_a_bad_one_is_one_line(tmp_path):
    done = _record(tmp_path / "wh", env={"SWITCHYARD_LOG_FORMAT": "json"})
    assert [entry["message"] for entry in _json_lines(done.stdout)] == [RECORDED]
    bad = _switchyard("pipelines", env={"SWITCHYARD_LOG_FORMAT": "yaml"})
    assert bad.returncode == 2 and bad.stdout == "", bad
    assert bad.stderr == "switchyard pipelines: error: SWITCHYARD_LOG_FORMAT must be one of text or json, not 'yaml'\n"


def test_quiet_hides_the_info_lines_and_the_work_is_still_done(tmp_path):
    done = _record(tmp_path / "wh", "-q")
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    shown = _switchyard("-q", "config", "--pipeline", "demo", "--warehouse", str(tmp_path / "wh"))
    assert re.search(r"^SWITCHYARD_MAX_RECORD_BYTES +2048  \(recorded with pipeline demo\)$", shown.stdout, re.M), \
        shown.stdout


def test_results_print_whatever_the_level_and_format():
    """`switchyard pipelines` is data, not a log line: the same listing quiet, in JSON or verbose (after its debug
    lines)."""
    listing = _switchyard("pipelines").stdout
    assert listing.startswith("demo  (key key, windows of 1:00:00; ") and "\nkinds  (key kind" in listing, listing
    assert _switchyard("-q", "pipelines").stdout == listing
    assert _switchyard("--log-format", "json", "pipelines").stdout == listing
    assert _switchyard("-v", "pipelines").stdout.endswith(listing)


def test_verbose_shows_the_debug_lines():
    plain = _switchyard("pipelines").stdout
    verbose = _switchyard("-v", "pipelines").stdout
    debug = verbose[:len(verbose) - len(plain)].splitlines()
    assert debug[0].startswith("switchyard pipelines: switchyard ") and f"Python {sys.version.split()[0]}" in debug[0]
    assert debug[1].startswith("switchyard pipelines: Settings(") and "log_format='text'" in debug[1], debug
    entries = _json_lines(_switchyard("-v", "--log-format", "json", "config").stdout.split("\nSWITCHYARD_")[0])
    assert [(e["level"], e["logger"], e["command"]) for e in entries] == [
        ("DEBUG", "switchyard.jobs.cli.parser", "switchyard config")]


def test_verbose_and_quiet_together_are_refused():
    done = _switchyard("-v", "-q", "pipelines")
    assert done.returncode == 2 and "not allowed with argument" in done.stderr, done.stderr


def test_the_one_line_error_stays_on_stderr_in_any_format_or_level(tmp_path):
    for options in ([], ["-q"], ["--log-format", "json"], ["-v", "--log-format", "json"]):
        done = _switchyard(*options, "status", "--pipeline", "demo", "--warehouse", str(tmp_path / "none"))
        assert done.returncode == 2 and done.stderr.count("\n") == 1, (options, done)
        assert done.stderr.startswith("switchyard status: error: pipeline demo has nothing in warehouse "), done
        assert "nothing in warehouse" not in done.stdout, (options, done.stdout)


def _serve_until(warehouse: Path, *options: str, seen: str) -> str:
    """`switchyard serve` until a line holding `seen` comes, then SIGTERM: its whole output."""
    process = subprocess.Popen([str(SWITCHYARD), *options, "serve", "--pipeline", "demo", "--warehouse",
                                str(warehouse), "--metrics-port", "0"], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    watchdog = threading.Timer(90, process.kill)  # a service that never says it ends the test, not the session
    watchdog.start()
    lines = []
    try:
        for line in process.stdout:
            lines.append(line)
            if seen in line:
                process.send_signal(signal.SIGTERM)
                break
        rest, _ = process.communicate(timeout=60)
    finally:
        watchdog.cancel()
    return "".join(lines) + rest


def test_quiet_keeps_the_warnings(tmp_path):
    """A service whose pipeline's handoff log cannot be read warns at each look; quiet, it says nothing else."""
    log_dir = tmp_path / "wh" / "demo" / "handoffs" / "_delta_log"
    log_dir.mkdir(parents=True)
    (log_dir / f"{0:020d}.json").write_text("not json\n")
    warning = "serve demo: could not look at the pipeline: "
    loud = _serve_until(tmp_path / "wh", seen=warning)
    assert "switchyard serve (demo): metrics at http://127.0.0.1:" in loud, loud
    quiet = _serve_until(tmp_path / "wh", "-q", seen=warning)
    assert quiet.startswith(warning) and "metrics at" not in quiet and "stopped" not in quiet, quiet
    entries = _json_lines(_serve_until(tmp_path / "wh", "-q", "--log-format", "json", seen=warning))
    assert entries and {(e["level"], e["logger"], e["pipeline"], e["command"]) for e in entries} == {
        ("WARNING", "switchyard.jobs.serve", "demo", "switchyard serve")}, entries
    assert all(e["message"].startswith(warning) for e in entries)


# ---- the formatters and levels, with a real logger in this process


def test_json_carries_the_exception_as_text(capsys):
    with log.configured(logging.INFO, "json", command="switchyard backfill", pipeline="demo"):
        try:
            raise ValueError("a bad day folder")
        except ValueError:
            logging.getLogger("switchyard.jobs.backfill").exception("backfill demo: failed")
        logging.getLogger("switchyard.jobs.serve").info("[kinds] a line", extra={"pipeline": "kinds"})
    failed, relayed = _json_lines(capsys.readouterr().out)
    assert failed["level"] == "ERROR" and failed["message"] == "backfill demo: failed"
    assert failed["exc_info"].startswith("Traceback") and "ValueError: a bad day folder" in failed["exc_info"]
    assert (failed["pipeline"], failed["command"]) == ("demo", "switchyard backfill")
    assert relayed["pipeline"] == "kinds" and "exc_info" not in relayed  # the record's own pipeline first


def test_text_is_the_message_with_its_traceback_under_it(capsys):
    with log.configured(logging.INFO, "text"):
        try:
            raise KeyError("p3")
        except KeyError:
            logging.getLogger("switchyard.x").exception("archive demo: failed")
    out = capsys.readouterr().out
    assert out.startswith("archive demo: failed\nTraceback (most recent call last):\n") and "KeyError: 'p3'" in out


def test_each_level_lets_through_what_it_says(capsys):
    said = logging.getLogger("switchyard.jobs.stream.monitor")
    for verbose, quiet, shown in ((False, False, ["info", "warning", "error"]), (False, True, ["warning", "error"]),
                                  (True, False, ["debug", "info", "warning", "error"])):
        with log.configured(log.level_of(verbose, quiet), "text"):
            for level in ("debug", "info", "warning", "error"):
                getattr(said, level)(level)
        assert capsys.readouterr().out.split() == shown, (verbose, quiet)


def test_a_configured_log_leaves_the_logger_as_it_found_it(capsys):
    root = logging.getLogger(log.ROOT)
    before = (list(root.handlers), root.level, root.propagate)
    with log.configured(logging.DEBUG, "json"):
        assert not root.propagate and len(root.handlers) == len(before[0]) + 1
    assert (list(root.handlers), root.level, root.propagate) == before
    logging.getLogger("switchyard.after").info("not written by switchyard's handler")
    assert capsys.readouterr().out == ""


def test_a_reporting_function_warns_through_its_default_and_a_collector_gets_every_line():
    said = logging.getLogger("switchyard.jobs.backfill.commit")
    assert log.warnings_to(said.info) == said.warning and log.logger_of(said.info) is said
    lines: list[str] = []
    assert log.warnings_to(lines.append) == lines.append and log.logger_of(lines.append) is None
    assert log.logger_of(said.warning) is None  # only a logger's info is a default to level up


def test_importing_switchyard_configures_no_logging():
    probe = ("import logging\n"
             "import switchyard, switchyard.jobs.cli, switchyard.jobs.log, switchyard.jobs.backfill, "
             "switchyard.jobs.stream, switchyard.jobs.serve, switchyard.deploy.jars\n"
             "root, ours = logging.getLogger(), logging.getLogger('switchyard')\n"
             "print(len(root.handlers), root.level, len(ours.handlers), ours.level, ours.propagate)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["0", str(logging.WARNING), "0", "0", "True"]


def test_a_command_run_in_process_logs_where_its_caller_redirects_output(tmp_path):
    """A campaign or a test runs `main` in its own process with stdout redirected: the lines go there."""
    import contextlib

    from switchyard.jobs.cli.parser import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["config", "--pipeline", "demo", "--warehouse", str(tmp_path / "wh"), "--record", RECORD])
    assert (code, out.getvalue()) == (0, RECORDED + "\n")
    assert logging.getLogger(log.ROOT).handlers == []
