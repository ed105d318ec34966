"""`make demo`: the life of a pipeline in a few minutes, through Dagster, recorded in the instance `make ui` shows.

1. History: three days of events ending at today's midnight (UTC) on a fresh topic; 80% archived.
2. The Dagster run `backfill_then_stream` over the archived days: tiles, state and windows, the Great Expectations
   gates, the handoff, and the stream, which stays live after the run (detached).
3. Live: `switchyard dev live` writes events stamped with the current time; the Dagster daemon's `stream_health`
   sensor observes the stream (lag, rates, update latency, watermark delay) and evaluates its health checks.
4. The nightly archiver's part: the archive grows to midnight. Then yesterday's backfill runs as the schedule
   runs it (`backfill_days`, one partition): with the stream live it rebases it at a cut, reconciled, and the
   same stream process goes on from the new handoff.
5. Live again, then the stop: the Dagster job `stop_stream`, the producer, the daemon.
6. The stream's own home: `switchyard start` asks for the stream again and `switchyard serve` runs it, its
   Prometheus metrics served (a scrape's main lines are printed); SIGTERM drains it.

`--live` (`make demo-live`) leaves the stream and the producer running; `--stop` (`make stop`) stops them.

The demo drives the system from outside, as an operator would: `switchyard` commands and Dagster runs
(`python -m switchyard.orchestration.run`) in processes of their own; it only reads the pipeline's handoff log, lease
and status to follow along.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from switchyard.deploy.dagster_home import default_home as default_dagster_home
from switchyard.deploy.dagster_home import prepare as prepare_dagster_home
from switchyard.deploy.paths import PROJECT_ROOT, runtime_home
from switchyard.state_handoff import settings
from switchyard.state_handoff.control import details, handoff_log, lease
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.tables import Tables

PIPELINE = "demo"
TOPIC_PREFIX = "demo.events."
HISTORY_DAYS = 3
# The commands of the environment the demo runs in (.venv/bin): the `switchyard` command line, Dagster's daemon.
BIN = Path(sys.executable).parent
SWITCHYARD = str(BIN / "switchyard")


def demo_home() -> Path:
    return runtime_home() / "demo"


class Demo:
    def __init__(self, warehouse: str, bootstrap: str, rate: float, live_seconds: float):
        self.warehouse, self.bootstrap, self.rate, self.live_seconds = warehouse, bootstrap, rate, live_seconds
        self.tables = Tables(warehouse, PIPELINE)
        self.started = time.monotonic()
        self.daemon: subprocess.Popen | None = None
        self.producer: subprocess.Popen | None = None
        self.env = {**os.environ, "SWITCHYARD_WAREHOUSE": warehouse, "SWITCHYARD_BOOTSTRAP": bootstrap,
                    "PYTHONUNBUFFERED": "1"}

    def say(self, line: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"[demo {int(elapsed) // 60:02d}:{int(elapsed) % 60:02d}] {line}", flush=True)

    def run(self, *command: str) -> None:
        done = subprocess.run(command, cwd=PROJECT_ROOT, env=self.env)
        if done.returncode != 0:
            raise UserError(f"`{_shown(command)}` failed with exit code {done.returncode} (its output is above)")

    def switchyard(self, *args: str) -> None:
        self.run(SWITCHYARD, *args)

    def dagster(self, job: str, *args: str) -> None:
        """A run of `job` in the Dagster instance (orchestration/run.py), in a process of its own."""
        self.run(sys.executable, "-m", "switchyard.orchestration.run", "--pipeline", PIPELINE, "--job", job, *args)

    # ------------------------------------------------------------ the phases

    def history(self) -> tuple[str, dict[int, int], str, str]:
        from switchyard.state_handoff.io.kafka_io import offset_bounds

        _delete_old_topics(self.bootstrap)
        shutil.rmtree(Path(self.warehouse) / PIPELINE, ignore_errors=True)
        midnight = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        first = midnight - timedelta(days=HISTORY_DAYS)
        topic = f"{TOPIC_PREFIX}{int(time.time())}"
        self.say(f"history: 20,000 events over {first.date()}..{(midnight - timedelta(days=1)).date()} on {topic}")
        self.switchyard("dev", "generate", "--topic", topic, "--events", "20000", "--keys", "500", "--partitions", "4",
                        "--days", str(HISTORY_DAYS), "--start", first.isoformat(), "--seed", "7",
                        "--malformed-rate", "0.01")
        until_midnight = {p: hi for p, (_, hi) in offset_bounds(self.bootstrap, topic).items()}
        self.say("archive 80% of each partition (the nightly archiver has not written the rest of yesterday yet)")
        self.switchyard("archive", "--pipeline", PIPELINE, "--topic", topic, "--fraction", "0.8")
        days = sorted(p.name.removeprefix("event_date=") for p in (Path(self.warehouse) / PIPELINE / "archive")
                      .glob("event_date=*"))
        return topic, until_midnight, days[0], days[-1]

    def start_daemon(self, dagster_home: Path) -> None:
        log = demo_home() / "daemon.log"
        self.say(f"the Dagster daemon (sensors: the stream's health every 30 s), log {log}")
        self.daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", "workspace.yaml"],
                                       cwd=PROJECT_ROOT, env={**self.env, "DAGSTER_HOME": str(dagster_home)},
                                       stdout=open(log, "w"), stderr=subprocess.STDOUT, start_new_session=True)

    def start_producer(self, topic: str) -> None:
        log = demo_home() / "live.log"
        self.say(f"live: {self.rate:g} events/s stamped with the current time (switchyard dev live), log {log}")
        self.producer = subprocess.Popen([SWITCHYARD, "dev", "live", "--topic", topic, "--rate", f"{self.rate:g}"],
                                         cwd=PROJECT_ROOT, env=self.env, stdout=open(log, "w"),
                                         stderr=subprocess.STDOUT, start_new_session=True)
        (demo_home() / "live.pid").write_text(str(self.producer.pid))

    def wait_for(self, status: str, after_seq: int, timeout: float = 600.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            entries = [e for e in handoff_log.entries(self.tables) if e.seq > after_seq]
            failed = next((e for e in entries if e.status == Status.FAILED), None)
            if failed is not None:
                raise UserError(f"the stream FAILED: {details.of(failed).reason}")
            if any(e.status == status for e in entries):
                return
            if not lease.stream_running(self.tables) and any(e.status == Status.SWITCHED for e in entries):
                raise UserError("the stream process is gone: see its process.log beside the checkpoints")
            time.sleep(2)
        raise UserError(f"no {status} from the stream within {timeout:.0f}s: see `switchyard status`")

    def watch_live(self) -> None:
        from switchyard.state_handoff.control.status import pipeline_status

        until = time.monotonic() + self.live_seconds
        while time.monotonic() < until:
            time.sleep(min(15.0, max(0.0, until - time.monotonic())))
            status = pipeline_status(self.tables, self.bootstrap)
            behind = status.get("offsets_behind")
            rate = status.get("input_rows_per_s")
            self.say(f"  live: {status['phase']}, "
                     f"{sum(behind.values()) if isinstance(behind, dict) else '-'} offsets behind, "
                     f"{'-' if rate is None else f'{rate:.0f}'} rows/s in")

    def serve(self, seconds: float = 5.0) -> None:
        """`switchyard start`, then `switchyard serve` runs the stream until it is caught up and a while more, its
        metrics scraped once; SIGTERM then drains it."""
        import urllib.request

        from switchyard.deploy.local_server import free_port

        port = free_port()
        seq = self.last_seq()
        self.switchyard("start", "--pipeline", PIPELINE)
        log = demo_home() / "serve.log"
        self.say(f"`switchyard serve --pipeline {PIPELINE}` runs the stream, log {log}; metrics at "
                 f"http://127.0.0.1:{port}/metrics")
        service = subprocess.Popen([SWITCHYARD, "serve", "--pipeline", PIPELINE, "--metrics-port", str(port)],
                                   cwd=PROJECT_ROOT, env=self.env, stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            self.wait_for(Status.CAUGHT_UP, seq)
            time.sleep(seconds)
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as page:
                lines = page.read().decode().splitlines()
            wanted = ("switchyard_phase{", "switchyard_offsets_behind", "switchyard_stream_running",
                      "switchyard_serve_stream_starts")
            shown = [line for line in lines if line.startswith(wanted)
                     and not (line.startswith("switchyard_phase{") and line.endswith(" 0.0"))]
            self.say("  a scrape of it: " + "; ".join(shown))
        finally:
            os.killpg(service.pid, signal.SIGTERM)
            code = service.wait(timeout=300)
        last = handoff_log.entries(self.tables)[-1].status
        if code != 0 or last != Status.STOPPED:
            raise UserError(f"`switchyard serve` ended with exit {code} and {last} last in the log: see {log}")
        self.say("the service stopped: its stream drained and logged STOPPED")

    def last_seq(self) -> int:
        return max([-1] + [e.seq for e in handoff_log.entries(self.tables)])

    def stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            os.killpg(self.daemon.pid, signal.SIGTERM)
            try:
                self.daemon.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.daemon.pid, signal.SIGKILL)


def _shown(command: tuple[str, ...]) -> str:
    """A command as the user would type it: the program's name without its folder."""
    return " ".join([Path(command[0]).name, *command[1:]])


def _delete_old_topics(bootstrap: str) -> None:
    from switchyard.state_handoff.io.kafka_io import admin_client

    with admin_client(bootstrap) as admin:
        old = [t for t in admin.list_topics() if t.startswith(TOPIC_PREFIX)]
        if old:
            admin.delete_topics(old)


def stop_demo(warehouse: str, out=print) -> None:
    """`make stop`: the demo's producer, then its stream (`switchyard stop`: it drains and logs STOPPED)."""
    stop_producer(out)
    tables = Tables(warehouse, PIPELINE)
    if not lease.stream_running(tables):
        out("the stream: not running")
        return
    command = (SWITCHYARD, "stop", "--pipeline", PIPELINE, "--warehouse", warehouse)
    stopped = subprocess.run(command, cwd=PROJECT_ROOT).returncode
    if stopped not in (0, 1):  # 1: it ended, without STOPPED
        raise UserError(f"`{_shown(command)}` failed with exit code {stopped} (its output is above)")
    out("the stream: " + ("STOPPED" if stopped == 0 else "ended without STOPPED (see `switchyard status`)"))


def stop_producer(out=print) -> None:
    """The producer first: the stream then drains everything it wrote."""
    pid_file = demo_home() / "live.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)
            out(f"the producer (pid {pid}): stopped")
        except ProcessLookupError:
            out("the producer: not running")
        pid_file.unlink()
    else:
        out("the producer: not running")


def play(demo: Demo, dagster_home: Path, leave_running: bool) -> None:
    if lease.stream_running(demo.tables):
        raise UserError("a demo stream is running (make demo-live left it?): `make stop` first")
    stop_demo(demo.warehouse, out=lambda _line: None)  # a producer an earlier demo-live left
    topic, until_midnight, first, last = demo.history()
    demo.start_daemon(dagster_home)
    seq = demo.last_seq()
    demo.say(f"Dagster: backfill_then_stream over {first}..{last}; the stream stays live after the run")
    demo.dagster("backfill_then_stream", "--from", first, "--to", last, "--detach-stream", "--caught-up-lag",
                 str(int(demo.rate * 60)))  # under live input never 0 behind: a minute of input is caught up
    demo.wait_for(Status.CAUGHT_UP, seq)
    demo.start_producer(topic)
    demo.watch_live()
    yesterday = (datetime.now(UTC) - timedelta(days=1)).date().isoformat()
    demo.say("the archive grows to midnight (the rest of yesterday)")
    demo.switchyard("archive", "--pipeline", PIPELINE, "--topic", topic, "--until-offsets",
                    "{" + ", ".join(f'"{p}": {o}' for p, o in sorted(until_midnight.items())) + "}")
    seq = demo.last_seq()
    demo.say(f"Dagster: backfill_days for {yesterday}, as the schedule runs it: the live stream rebases at a cut")
    demo.dagster("backfill_days", "--from", yesterday, "--to", yesterday)
    demo.wait_for(Status.SWITCHED, seq)  # the same stream process, on the handoff at the cut
    demo.watch_live()
    if leave_running:
        demo.say("the stream and the producer stay live: `make ui` to watch them, `make stop` to stop them")
        return
    demo.say("the producer stops; then the Dagster job stop_stream (the stream drains what it wrote)")
    stop_producer()
    demo.dagster("stop_stream")
    demo.serve()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m switchyard.deploy.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--live", action="store_true", help="leave the stream and the producer running")
    parser.add_argument("--stop", action="store_true", help="stop what --live left running")
    parser.add_argument("--rate", type=float, default=20.0, help="live events per second (default 20)")
    parser.add_argument("--live-seconds", type=float, default=45.0,
                        help="how long each live phase lasts (default 45: the sensor ticks every 30 s)")
    args = parser.parse_args(argv)
    warehouse = str(Path(settings.value("SWITCHYARD_WAREHOUSE")).resolve())
    bootstrap = settings.value("SWITCHYARD_BOOTSTRAP")
    dagster_home = default_dagster_home()
    demo_home().mkdir(parents=True, exist_ok=True)
    try:
        if args.stop:
            stop_demo(warehouse)
            return 0
        prepare_dagster_home(dagster_home)  # before the daemon and the runs open it at once
        demo = Demo(warehouse, bootstrap, args.rate, args.live_seconds)
        demo.env["DAGSTER_HOME"] = str(dagster_home)
        try:
            play(demo, dagster_home, args.live)
        except BaseException:
            stop_demo(warehouse)
            raise
        finally:
            demo.stop_daemon()
        demo.say(f"done; the runs, checks and observations are in {dagster_home}: `make ui`, then "
                 f"http://127.0.0.1:{os.environ.get('DAGSTER_PORT', '3000')}")
        demo.switchyard("status", "--pipeline", PIPELINE)
        return 0
    except UserError as err:
        print(f"switchyard demo: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
