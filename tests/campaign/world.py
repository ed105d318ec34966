"""A history run against real components: one topic on a real broker, one warehouse of Delta tables, the
`switchyard` commands as a user runs them (in this process through the command line's own entry point, or in a
process of their own when a crash point is armed or a stream stays live), and the faults done to them from outside.

Every step's outcome is kept: ok, refused (exit 2, its one line), not now (exit 75, its one line), failed (exit 1),
killed at its crash point, or a traceback. A traceback, a refusal of more than one line or a fenced owner that keeps
running is a violation at once; the rest is judged by `check.py` after the way on."""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from kafka import TopicPartition

from switchyard.state_handoff import faults
from switchyard.state_handoff.control import lease
from switchyard.state_handoff.io.kafka_io import admin_client, create_topic, offset_bounds, produce
from switchyard.state_handoff.tables import Tables
from tests.campaign.history import Step
from tests.campaign.records import Producer
from tests.support import oracle

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = "demo"
LEASE_SECONDS = 6  # short, so a frozen owner's lease expires within a history
STREAM_FLAGS = ["--caught-up-lag", "0", "--tables-trigger-seconds", "1"]
# every process of a history: Spark's test profile, two state partitions, short leases
# Switch backs by lag alone: the campaign's backlogs are small, and by cost a stream would rather drain them than
# rebase, so the rebases a switch back starts would never meet the faults.
ENV = {"SWITCHYARD_SPARK_PROFILE": "test", "SWITCHYARD_STATE_PARTITIONS": "2", "SWITCHYARD_SWITCH_BACK": "lag",
       lease.ENV: str(LEASE_SECONDS)}
# the definitions a history moves between (`redeploy` there, `redeploy` or `rollback` back): the demo, and the demo
# with one aggregation added; the oracle's columns are in both
DEFINITIONS = {"demo": PIPELINE, "plus_one": "tests.support.changed_pipeline:DEMO_PLUS_ONE",
               "payments": "registry_payments_pipeline:PIPELINE"}  # the Avro histories' (tests/campaign/registry.py)


@dataclass
class Outcome:
    step: str
    result: str  # ok | refused | failed | killed | traceback | done
    detail: str = ""
    seconds: float = 0.0


@dataclass
class World:
    broker: object  # deploy.kafka_broker.Broker: stopped and started by a bounce
    root: Path
    topic: str = field(default_factory=lambda: f"campaign.{uuid.uuid4().hex[:10]}")
    partitions: int = 2
    live: subprocess.Popen | None = None
    outcomes: list[Outcome] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    kept: dict = field(default_factory=dict)  # (partition, offset) -> record, read before retention deleted it
    corrupted: list[tuple[Path, Path]] = field(default_factory=list)
    stream_settings: list[str] = field(default_factory=list)
    definition: str = "demo"  # which of DEFINITIONS the commands run under
    services: list = field(default_factory=list)  # surfaces.Service: the `switchyard serve` processes started
    orphans: list[int] = field(default_factory=list)  # streams whose service was killed, left running
    scraped: list[str] = field(default_factory=list)  # every metrics text scraped
    secret: str = field(default_factory=lambda: f"campaign-secret-{uuid.uuid4().hex[:12]}")
    secret_pids: list[str] = field(default_factory=list)  # processes whose command line showed the secret
    family: str = "json"  # the demo's JSON records, or "avro": a team's Avro pipeline and a schema registry
    served_ever: bool = False  # a service ran: the way on is a served pipeline's

    def __post_init__(self):
        self.root.mkdir(parents=True, exist_ok=True)
        self.registry = None
        if self.family == "avro":
            from tests.campaign.registry import PIPELINE_NAME, AvroProducer, Registry

            self.registry, self.definition = Registry(self.root), "payments"
            self.producer = AvroProducer(self.registry)
        else:
            self.producer = Producer()
        self.tables = Tables(str(self.root / "wh"), PIPELINE_NAME if self.registry else PIPELINE)
        self.log_path = self.root / "history.log"
        self.faults: dict[str, int] = {}
        self.commands: dict[str, int] = {}
        create_topic(self.bootstrap, self.topic, self.partitions)

    @property
    def bootstrap(self) -> str:
        return self.broker.bootstrap

    def log(self, line: str) -> None:
        with open(self.log_path, "a") as out:
            out.write(f"[campaign {time.strftime('%H:%M:%S')}] {line}\n")

    # ---- running the command line ----

    def _argv(self, command: list[str], pipeline_ref: str | None = None) -> list[str]:
        return [*command, "--pipeline", pipeline_ref or DEFINITIONS[self.definition], "--warehouse",
                self.tables.warehouse, "--bootstrap", self.bootstrap]

    @property
    def env(self) -> dict:
        """Every process's settings: ENV, and a secret where a team's would be (a keystore password in the JVM
        options), which no log line, metric, status or command line may show."""
        return {**ENV, "SWITCHYARD_JVM_OPTIONS": f"-Djavax.net.ssl.keyStorePassword={self.secret}",
                **(self.registry.env if self.registry else {})}

    def cli(self, step: str, command: list[str], env: dict | None = None) -> Outcome:
        """`switchyard COMMAND` in this process, through the command line's own entry point."""
        from switchyard.jobs.cli.parser import main

        self.commands[command[0]] = self.commands.get(command[0], 0) + 1
        saved = {k: os.environ.get(k) for k in {**self.env, **(env or {})}}
        os.environ.update({**self.env, **(env or {})})
        err, started = io.StringIO(), time.monotonic()
        try:
            with open(self.log_path, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = main(self._argv(command))
        except BaseException:  # noqa: BLE001 - an uncaught exception is what the campaign looks for
            return self._outcome(step, "traceback", traceback.format_exc()[-2000:], started)
        finally:
            for k, v in saved.items():
                os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
        return self._judge(step, code, err.getvalue(), started)

    def spawn(self, command: list[str], env: dict | None = None, pipeline_ref: str | None = None,
              prefix: tuple[str, ...] = ()) -> subprocess.Popen:
        self.commands[command[0]] = self.commands.get(command[0], 0) + 1
        return subprocess.Popen([*prefix, sys.executable, "-m", "switchyard.jobs.cli",
                                 *self._argv(command, pipeline_ref)],
                                stdout=open(self.log_path, "a"), stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, **self.env, **(env or {})}, start_new_session=True)

    def run_process(self, step: str, command: list[str], env: dict | None = None, timeout: float = 600,
                    pipeline_ref: str | None = None) -> Outcome:
        """`switchyard COMMAND` in a process of its own (a crash point kills the whole process tree); `pipeline_ref`:
        under that definition instead of the world's."""
        started, mark = time.monotonic(), self.log_path.stat().st_size if self.log_path.exists() else 0
        proc = self.spawn(command, env, pipeline_ref)
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return self._outcome(step, "violation", f"no end within {timeout:.0f} s", started)
        with open(self.log_path, errors="replace") as fh:
            fh.seek(mark)
            output = fh.read()
        if code == -signal.SIGKILL:
            return self._outcome(step, "killed", "", started)
        errors = "\n".join(line for line in output.splitlines() if ": error: " in line)
        if "Traceback (most recent call last)" in output:
            return self._outcome(step, "traceback", output[-2000:], started)
        return self._judge(step, code, errors, started)

    def _judge(self, step: str, code: int, stderr: str, started: float) -> Outcome:
        lines = [line for line in stderr.splitlines() if line.strip()]
        if code == 0:
            return self._outcome(step, "ok", "", started)
        if code in (1, 2, 75) and len(lines) <= 1:
            result = {2: "refused", 75: "not now"}.get(code, "failed")
            return self._outcome(step, result, lines[0] if lines else "", started)
        return self._outcome(step, "violation", f"exit {code} with {len(lines)} lines: {stderr[-1500:]}", started)

    def _outcome(self, step: str, result: str, detail: str, started: float) -> Outcome:
        outcome = Outcome(step, result, detail, round(time.monotonic() - started, 1))
        self.outcomes.append(outcome)
        self.log(f"{step} -> {result} {detail[:300]}")
        if result in ("traceback", "violation"):
            self.violations.append(f"{step}: {result}: {detail}")
        return outcome

    # ---- the live stream ----

    def start_live(self, flags: list[str]) -> None:
        """A `switchyard stream` that stays live, once it holds the pipeline's lease (or has exited)."""
        self.live = self.spawn(["stream", *STREAM_FLAGS, *self.stream_settings, *flags])
        self.wait_for_lease(self.live)

    def wait_for_lease(self, proc: subprocess.Popen, timeout: float = 90) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            owner = lease.owner(self.tables)
            if owner is not None and owner.owner_pid == proc.pid:
                return True
            time.sleep(0.5)
        return False

    def live_running(self) -> bool:
        return self.live is not None and self.live.poll() is None

    def stop_live(self, how: str, step: str) -> Outcome:
        started = time.monotonic()
        if not self.live_running():
            return self._outcome(step, "done", f"no live stream (exit {self.live and self.live.returncode})", started)
        if how == "command":
            outcome = self.cli(step, ["stop", "--timeout", "180"])
        else:
            os.kill(self.live.pid, signal.SIGTERM)
            outcome = None
        try:
            code = self.live.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(self.live.pid, signal.SIGKILL)
            self.live.wait()
            return self._outcome(step, "violation", "the live stream did not stop within 180 s", started)
        finally:
            self.live = None
        return outcome or self._outcome(step, "ok" if code == 0 else "failed", f"exit {code}", started)

    # ---- the records ----

    def read_all(self) -> list[oracle.KafkaRecord]:
        """Every record the topic ever held: what Kafka holds now and what was read before retention deleted it."""
        records = dict(self.kept)
        records.update({(r.partition, r.offset): r for r in oracle.read_topic(self.bootstrap, self.topic)})
        return [records[k] for k in sorted(records)]

    def produce(self, kind: str, count: int, seed: int) -> None:
        produce(self.bootstrap, self.topic, self.producer.records(kind, count, seed, self.partitions))

    def archived_end(self) -> dict[int, int]:
        """Per partition, the end of what the archive holds, from its record (read without a JVM)."""
        from switchyard.state_handoff.io.archive_files import archive_meta

        try:
            return {int(p): int(o) for p, o in (archive_meta(self.tables.archive).get("cut") or {}).items()}
        except Exception:  # noqa: BLE001 - no archive yet, or its record unreadable: nothing is archived for sure
            return {}

    # ---- faults from outside ----

    def count_fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def retention(self, share: float) -> dict[int, int]:
        """Kafka deletes records below `share` of the archive's end in each partition: only archived ones."""
        ends = self.archived_end()
        bounds = offset_bounds(self.bootstrap, self.topic)
        below = {p: min(bounds[p][1], int(end * share)) for p, end in ends.items() if p in bounds}
        below = {p: o for p, o in below.items() if o > bounds[p][0]}
        if below:
            self.kept.update({(r.partition, r.offset): r for r in oracle.read_topic(self.bootstrap, self.topic)})
            with admin_client(self.bootstrap) as admin:
                admin.delete_records({TopicPartition(self.topic, p): o for p, o in below.items()})
        return below

    def corrupt(self, rng: random.Random, what: str = "data") -> Path | None:
        """One file of the archive overwritten with garbage (its copy kept for the repair): a committed data file,
        or a file of the archive record's own table. They are ordered by folder and size, not by their random
        names, so a seed picks the same one each run."""
        pattern = "_record/*.parquet" if what == "record" else "event_date=*/*.parquet"
        files = sorted((f for f in Path(self.tables.archive).glob(pattern)),
                       key=lambda f: (f.parent.name, f.stat().st_size, f.name))
        if not files:
            return None
        victim = files[rng.randrange(len(files))]
        backup = self.root / "corrupt-backup" / f"{len(self.corrupted)}.parquet"
        backup.parent.mkdir(exist_ok=True)
        shutil.copy2(victim, backup)
        victim.write_bytes(b"PAR1" + bytes(rng.randrange(256) for _ in range(64)) + b"PAR1")
        self.corrupted.append((victim, backup))
        return victim

    def repair(self) -> int:
        for victim, backup in self.corrupted:
            shutil.copy2(backup, victim)
        repaired, self.corrupted = len(self.corrupted), []
        return repaired

    def add_partition(self) -> None:
        from kafka.admin import NewPartitions

        with admin_client(self.bootstrap) as admin:
            admin.create_partitions({self.topic: NewPartitions(total_count=self.partitions + 1)})
        self.partitions += 1
        self._await_partitions()

    def _await_partitions(self, timeout_s: float = 60.0) -> None:
        """Until the broker's metadata lists every partition with a leader: a producer started before that (the
        broker's cache lags the controller, more so after a bounce) fails the new partition's records with
        "Unknown partition"."""
        from confluent_kafka import Producer

        from switchyard.state_handoff.io.kafka_security import librdkafka_config

        client = Producer(librdkafka_config(self.bootstrap))
        deadline = time.monotonic() + timeout_s
        while True:
            topic = client.list_topics(self.topic, timeout=10).topics[self.topic]
            if len(topic.partitions) >= self.partitions and all(p.leader >= 0 for p in topic.partitions.values()):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.topic}: {self.partitions} partitions with leaders not seen in {timeout_s}s")
            time.sleep(0.5)

    def bounce_broker(self, seconds: float) -> None:
        from switchyard.deploy import kafka_broker

        kafka_broker.stop(self.broker)
        try:
            time.sleep(seconds)
        finally:
            kafka_broker.start(self.broker)

    def takeover(self, flags: list[str], step: str) -> None:
        """Freeze the live stream past its lease, start another that takes the pipeline over, thaw the first: it
        must notice it lost the lease and exit without writing."""
        started = time.monotonic()
        if not self.live_running():
            self._outcome(step, "done", "no live stream", started)
            return
        old = self.live
        os.killpg(old.pid, signal.SIGSTOP)
        try:
            time.sleep(LEASE_SECONDS * 1.5 + 2)
            self.start_live(flags)
        finally:
            os.killpg(old.pid, signal.SIGCONT)
        try:
            code = old.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(old.pid, signal.SIGKILL)
            old.wait()
            self._outcome(step, "violation", "the frozen owner kept running for 120 s after it was taken over",
                          started)
            return
        self._outcome(step, "ok", f"the frozen owner exited {code}; the new one "
                                  f"{'runs' if self.live_running() else f'exited {self.live.returncode}'}", started)

    def kill_live(self, step: str) -> None:
        started = time.monotonic()
        if self.live_running():
            os.killpg(self.live.pid, signal.SIGKILL)
            self.live.wait()
        self.live = None
        self._outcome(step, "killed", "", started)

    def close(self) -> None:
        """Whatever still runs of the history's processes is killed (after a violation, or a test's failure)."""
        if self.live is not None and self.live.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.live.pid, signal.SIGCONT)
                os.killpg(self.live.pid, signal.SIGKILL)
            self.live.wait()
        self.live = None
        for service in self.services:
            if service.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(service.proc.pid, signal.SIGKILL)
                service.proc.wait()
        self.services = []
        for pid in self.orphans:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self.orphans = []

    def end(self) -> None:
        """The history over: its processes, and its schema registry."""
        self.close()
        if self.registry is not None:
            self.registry.close()


def run_step(world: World, step: Step, rng: random.Random) -> None:
    op, a = step.op, step.args
    name = str(step)
    started = time.monotonic()
    world.log(f"step {name}")
    from tests.campaign.surfaces import cmdline_sightings, run_surface_step, surface_step

    if surface_step(world, step):
        run_surface_step(world, step, rng)
    elif op == "produce":
        world.produce(a["kind"], a["count"], a["seed"])
        world._outcome(name, "done", "", started)
    elif op == "archive":
        world.cli(name, ["archive", "--topic", world.topic, "--fraction", str(a["fraction"])])
    elif op == "backfill":
        days = ["--from", a["from"], "--to", a["to"]] if "from" in a else []
        world.cli(name, ["backfill", "--timeout", "240", *days])
    elif op == "handoff":
        world.cli(name, ["handoff"])
    elif op == "stream":
        stop = ["--until-caught-up"] if a.get("until_caught_up") else ["--for", str(a["for"])]
        world.cli(name, ["stream", *STREAM_FLAGS, *world.stream_settings, *stop])
    elif op == "start_live":
        world.start_live(_flags(a))
        world._outcome(name, "done", f"pid {world.live.pid}" + ("" if world.live_running() else
                                                                 f", exited {world.live.returncode}"), started)
    elif op == "wait":
        time.sleep(a["seconds"])
        owner = lease.owner(world.tables)
        world._outcome(name, "done", "live" if world.live_running() else
                       f"held by {owner.command} pid {owner.owner_pid}" if owner else "no stream", started)
    elif op == "stop":
        world.stop_live(a["how"], name)
    elif op == "rebase":
        days = ["--from", "2026-03-01"] if a.get("days") else []
        world.cli(name, ["rebase", "--timeout", "240", *days])
    elif op == "crash":
        world.count_fault(f"crash {a['point'].split(':')[0]}")
        command = {"stream": ["stream", *STREAM_FLAGS, "--max-offsets-per-trigger", "150", "--until-caught-up"],
                   "rebase": ["rebase", "--timeout", "240"]}.get(a["command"], [a["command"]])
        world.run_process(name, command, env={faults.ENV: a["point"]})
    elif op == "kill_live":
        world.count_fault("kill_live")
        world.kill_live(name)
    elif op == "takeover":
        world.count_fault("takeover")
        world.takeover(["--max-offsets-per-trigger", "500"], name)
    elif op == "broker_bounce":
        world.count_fault("broker_bounce")
        world.bounce_broker(a["seconds"])
        world._outcome(name, "done", "", started)
    elif op == "retention":
        world.count_fault("retention")
        world._outcome(name, "done", f"deleted below {world.retention(a['share'])}", started)
    elif op == "corrupt":
        world.count_fault("corrupt")
        what = a.get("what") or ("record" if rng.random() < 0.3 else "data")  # from the run's rng: the history stays
        world._outcome(name, "done", f"corrupted {world.corrupt(rng, what)}", started)
    elif op == "repair":
        world._outcome(name, "done", f"repaired {world.repair()}", started)
    elif op == "add_partition":
        world.count_fault("add_partition")
        world.add_partition()
        world._outcome(name, "done", f"{world.partitions} partitions", started)
    elif op == "race":
        world.count_fault("race")
        command = {"stream": ["stream", *STREAM_FLAGS, "--until-caught-up"], "handoff": ["handoff"],
                   "archive": ["archive", "--topic", world.topic, "--fraction", "1.0"]}[a["command"]]
        world.cli(name, command)
    elif op == "setting":
        world.count_fault("setting")
        if "state_partitions" in a:  # kept for the streams that follow, until the way on
            world.stream_settings = ["--state-partitions", str(a["state_partitions"])]
            world.cli(name, ["stream", *STREAM_FLAGS, *world.stream_settings, "--until-caught-up"])
        else:  # a pipeline-wide setting other than the recorded one, for this command only
            world.cli(name, ["stream", *STREAM_FLAGS, "--until-caught-up"],
                      env={"SWITCHYARD_MAX_RECORD_BYTES": str(a["max_record_bytes"])})
    else:
        raise ValueError(f"unknown step {op}")
    world.secret_pids += cmdline_sightings(world)


def _flags(args: dict) -> list[str]:
    flags = ["--max-offsets-per-trigger", str(args.get("max_offsets_per_trigger", 500))]
    if "switch_back_lag" in args:
        flags += ["--switch-back-lag", str(args["switch_back_lag"]), "--switch-back-after",
                  str(args["switch_back_after"])]
    return flags
