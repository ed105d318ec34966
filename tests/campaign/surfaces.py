"""The campaign's newer surfaces: served streams (`switchyard serve`, one or two at once), `start` and `stop` of a
served stream, `redeploy` to a changed definition and `rollback`, `--drop-previous`, the Dagster jobs that ask for a
rebase, a stop or a start (in process, through Dagster's API), the metrics endpoint scraped during the history; the
faults done to them (a service SIGKILLed alone or with its stream, SIGTERM at a random moment, the broker away longer
than a stream's life); and what every output must show at the end (the updates topic, the metrics against
`switchyard status`, no secret anywhere a history could see one)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from switchyard.state_handoff.control import lease
from switchyard.state_handoff.control.status import pipeline_status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.control.lifecycle import Phase
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.pipelines import get_pipeline
from tests.campaign.world import DEFINITIONS, STREAM_FLAGS, World

STOP_TIMEOUT_S = 300  # the shipped unit's TimeoutStopSec: a service's SIGTERM must end within it
SERVED_FLAGS = [*STREAM_FLAGS, "--max-offsets-per-trigger", "500"]


@dataclass
class Service:
    proc: subprocess.Popen
    port: int
    ref: str


def _definition_version(name: str) -> str:
    return definition.version(get_pipeline(DEFINITIONS[name]))


def recorded_definition(world: World) -> str:
    """Which of DEFINITIONS the tables record now (the handoff's), by its version; "demo" before any handoff (an
    Avro history's: "payments", its one definition)."""
    if world.family == "avro":
        return "payments"
    try:
        recorded = PipelineView.read(world.tables).recorded_definition
    except Exception:  # noqa: BLE001 - tables no command can read (a wedge's): the commands' own refusals say why
        return world.definition
    version = ((recorded[1] if recorded else None) or {}).get("version")
    return definition_for_version(version) or "demo"


def definition_for_version(version: str | None) -> str | None:
    return next((name for name in ("demo", "plus_one") if _definition_version(name) == version), None)


# ---- services ----

# a service "on another host": its own UTS namespace and host name, so that a lease it meets held by a process of
# this host is one it cannot see die, and it takes over only once the lease expired (docs/operating.md)
OTHER_HOST = ("unshare", "--uts", "sh", "-c", 'hostname campaign-other-host && exec "$0" "$@"')


def start_service(world: World, step: str, other_host: bool = False) -> None:
    from switchyard.deploy.local_server import free_port

    started, port = time.monotonic(), free_port()
    ref = DEFINITIONS[world.definition]
    args = ["serve", "--metrics-port", str(port), *[f"--stream-arg={a}" for a in SERVED_FLAGS]]
    proc = world.spawn(args, pipeline_ref=ref, prefix=OTHER_HOST if other_host else ())
    world.services.append(Service(proc, port, ref))
    world.served_ever = True
    if other_host:
        world.count_fault("serve on another host")
    world._outcome(step, "done", f"service pid {proc.pid} on port {port} ({world.definition}"
                   + (", another host)" if other_host else ")"), started)


def running_services(world: World) -> list[Service]:
    return [s for s in world.services if s.proc.poll() is None]


def _stream_pid(world: World) -> int | None:
    owner = lease.owner(world.tables)
    return owner.owner_pid if owner is not None and owner.command == lease.STREAM else None


def _parent(pid: int) -> int | None:
    from switchyard.state_handoff.control import processes

    try:
        return processes.stat(pid).parent
    except Exception:  # noqa: BLE001 - gone meanwhile
        return None


def kill_service(world: World, step: str, with_stream: bool) -> None:
    """SIGKILL of a service (its process group); `with_stream`: its stream process too, as when its host dies."""
    started = time.monotonic()
    alive = running_services(world)
    if not alive:
        world._outcome(step, "done", "no service running", started)
        return
    stream = _stream_pid(world)
    owner = next((s for s in alive if stream is not None and _parent(stream) == s.proc.pid), None)
    service = owner or alive[0]  # the one whose stream holds the lease, when one does
    stream = stream if with_stream and owner is not None else None
    with contextlib.suppress(ProcessLookupError):
        os.killpg(service.proc.pid, signal.SIGKILL)
    service.proc.wait()
    if stream is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(os.getpgid(stream), signal.SIGKILL)
    world.services.remove(service)
    world._outcome(step, "killed", f"service {service.proc.pid}" + (f" and stream {stream}" if stream else ""),
                   started)


def sigterm_service(world: World, step: str) -> None:
    """SIGTERM to a service, at whatever moment the history is in (a rebase included): it must end, exit 0, within
    the unit's stop timeout."""
    started = time.monotonic()
    alive = running_services(world)
    if not alive:
        world._outcome(step, "done", "no service running", started)
        return
    service = alive[-1]
    _until(lambda: scrape(world, service, record=False) is not None or service.proc.poll() is not None, 60)
    service.proc.send_signal(signal.SIGTERM)  # once it runs: the interpreter's start is no moment of its life
    try:
        code = service.proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(service.proc.pid, signal.SIGKILL)
        service.proc.wait()
        world.services.remove(service)
        world._outcome(step, "violation", f"the service did not end within {STOP_TIMEOUT_S} s of its SIGTERM",
                       started)
        return
    world.services.remove(service)
    world._outcome(step, "ok" if code == 0 else "violation", f"service exit {code}", started)


def stop_services(world: World, step: str) -> None:
    while running_services(world):
        sigterm_service(world, step)
    world.services = []


def restart_services(world: World, step: str) -> None:
    """An operator's deploy of changed code: every service stopped, as many started under the recorded definition."""
    count = max(1, len(running_services(world)))
    stop_services(world, step)
    world.definition = recorded_definition(world)
    for _ in range(count):
        start_service(world, step)


def scrape(world: World, service: Service | None = None, timeout: float = 10.0, record: bool = True) -> str | None:
    """One scrape of a service's metrics (None: no service answers); a scrape that blocks past `timeout` is a
    violation. `record`: kept for the secret's check."""
    service = service or next(iter(running_services(world)), None)
    if service is None:
        return None
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{service.port}/metrics", timeout=timeout) as answer:
            text = answer.read().decode()
    except OSError as err:
        if service.proc.poll() is None and "refused" not in str(err):
            world.violations.append(f"metrics of service {service.proc.pid}: no answer within {timeout} s ({err})")
        return None
    if record:
        world.scraped.append(text)
    return text


# ---- Dagster, in process ----

def dagster_job(world: World, step: str, job: str) -> None:
    """A Dagster job of a served deployment run in process (`stop_stream`, `start_stream`, `rebase_stream`)."""
    import dagster as dg

    from switchyard.orchestration.factory import switchyard_definitions
    from switchyard.orchestration.scope import PipelineDeployment
    from tests.support.live_stream import resources

    started = time.monotonic()
    world.commands[f"dagster {job}"] = world.commands.get(f"dagster {job}", 0) + 1
    pipeline = get_pipeline(DEFINITIONS[world.definition])
    defs = switchyard_definitions([PipelineDeployment(pipeline, first_day="2026-03-01", served=True)],
                                  resources=resources(world.tables, world.bootstrap))
    try:
        with open(world.log_path, "a") as out, contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            result = defs.resolve_job_def(f"{world.tables.pipeline}__{job}").execute_in_process(
                raise_on_error=False)
    except dg.DagsterError as err:
        world._outcome(step, "failed", str(err).splitlines()[0][:300], started)
        return
    failure = next((e for e in result.all_events if e.event_type_value == "STEP_FAILURE"), None)
    detail = "" if failure is None else str(failure.event_specific_data.error.message).strip().splitlines()[-1][:300]
    world._outcome(step, "ok" if result.success else "refused", detail, started)


# ---- what every output must show ----

def metrics_differences(world: World, text: str, status: dict) -> list[str]:
    """The metrics a service served against `switchyard status` read at the same moment: the phase, the offsets
    behind, the lease's epoch."""
    from prometheus_client.parser import text_string_to_metric_families

    values: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("pipeline") == world.tables.pipeline:
                values.setdefault(sample.name, []).append(sample)
    found = []
    phases = [s.labels["phase"] for s in values.get("switchyard_phase", []) if s.value == 1]
    if phases != [status["phase_name"]]:
        found.append(f"metrics: phase {phases}, status {status['phase_name']}")
    behind = sum(s.value for s in values.get("switchyard_offsets_behind", []))
    want = sum(v for v in (status.get("offsets_behind") or {}).values() if isinstance(v, (int, float)))
    if behind != want:
        found.append(f"metrics: {behind:g} offsets behind, status {want}")
    epochs = [s.value for s in values.get("switchyard_lease_epoch", [])]
    held = status.get("lease")
    if epochs != ([held["epoch"]] if held else []):
        found.append(f"metrics: lease epoch {epochs}, status {held and held['epoch']}")
    return found


def status_and_metrics_agree(world: World, attempts: int = 5) -> list[str]:
    """A scrape and a status a moment apart agree once the pipeline stands still (caught up, nothing produced): a
    few tries, since a scrape and a status can straddle a batch."""
    found = ["metrics: no service answered"]
    for _ in range(attempts):
        status = dict(pipeline_status(world.tables, world.bootstrap))
        status["phase_name"] = Phase(status["phase"]).name
        text = scrape(world)
        if text is None:
            return found
        found = metrics_differences(world, text, status)
        if not found:
            return []
        time.sleep(2)
    return found


def cmdline_sightings(world: World) -> list[str]:
    """Processes whose command line shows the history's secret, now."""
    seen = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if world.secret.encode() in cmdline.read_bytes():
                seen.append(cmdline.parent.name)
    return seen


def secret_sightings(world: World) -> list[str]:
    """Where the history's secret showed: a log line, a scrape, `switchyard status`, a process's command line."""
    found = [f"secret on the command line of pid {pid}" for pid in world.secret_pids][:3]
    if world.log_path.exists():
        found += [f"secret in a log line: {line[:200]}" for line in world.log_path.read_text(errors="replace")
                  .splitlines() if world.secret in line][:3]
    found += ["secret in a scrape of the metrics" for text in world.scraped if world.secret in text][:1]
    with contextlib.suppress(Exception):  # tables no status can read (a wedge's) show no secret either
        if world.secret in repr(pipeline_status(world.tables)):
            found.append("secret in `switchyard status`")
    return found


def way_on_served(world: World) -> None:
    """What docs/operating.md tells an operator of a served pipeline: a service running (started when none is),
    `switchyard start` when a stop request or a hold-down keeps the stream down; then it streams caught up with no
    other step, and its metrics agree with `switchyard status`; then each service stopped by SIGTERM (within the
    unit's stop timeout). A served pipeline no service gets streaming caught up within five minutes is wedged."""
    if not running_services(world):
        start_service(world, "way on: serve")
    ledger = PipelineView.read(world.tables).ledger
    held = any("held down" in line for line in world.log_path.read_text(errors="replace").splitlines()[-400:])
    if ledger.stop_in_force() is not None or held:
        world.cli("way on: start", ["start"])
    started = time.monotonic()
    deadline = started + 300
    while time.monotonic() < deadline:
        status = pipeline_status(world.tables, world.bootstrap)
        behind = status.get("offsets_behind") or {}
        if status["stream_running"] and behind and all(v == 0 for v in behind.values()) \
                and status["phase"] in (Phase.CAUGHT_UP, Phase.STREAMING):
            world._outcome("way on: served, caught up", "done", f"phase {status['phase']}, pid "
                           f"{(status.get('lease') or {}).get('pid')}", started)
            break
        time.sleep(2)
    else:
        world.violations.append(f"wedged: no service got the served pipeline streaming caught up within 300 s "
                                f"(phase {pipeline_status(world.tables)['phase']})")
        stop_services(world, "way on: stop the services")
        return
    world.violations += status_and_metrics_agree(world)
    stop_services(world, "way on: stop the services")


# ---- the steps ----

SURFACE_OPS = {"serve", "kill_service", "kill_host", "sigterm_service", "broker_outage", "scrape", "dagster", "start",
               "redeploy", "rollback", "drop_previous", "register", "registry_down", "delete_subject"}


def surface_step(world: World, step) -> bool:
    """Whether `step` is one of this module's (a `stop` or a `rebase` of a served stream, a redeploy's crash
    included)."""
    return (step.op in SURFACE_OPS or (step.op == "crash" and step.args["command"] == "redeploy")
            or (step.op == "stop" and bool(running_services(world))))


def run_surface_step(world: World, step, rng) -> None:
    op, a, name, started = step.op, step.args, str(step), time.monotonic()
    if op == "serve":
        start_service(world, name, other_host=a.get("host") == "other")
    elif op == "stop":
        world.cli(name, ["stop", "--timeout", "180"])
    elif op == "start":
        world.cli(name, ["start"])
    elif op in ("kill_service", "kill_host"):
        world.count_fault(op)
        stream = _stream_pid(world)
        if op == "kill_service" and stream is not None:
            world.orphans.append(stream)  # killed with the history, if its own service's: it streams on till then
        kill_service(world, name, with_stream=op == "kill_host")
    elif op == "sigterm_service":
        world.count_fault("sigterm_service during a rebase" if a.get("during_rebase") else op)
        waiter = None
        if a.get("during_rebase") and running_services(world):
            waiter = world.spawn(["rebase", "--timeout", "240"])
            _until(lambda: _rebasing(world) or waiter.poll() is not None, rng.choice((20, 60)))
        sigterm_service(world, name)
        if waiter is not None and waiter.poll() is None:
            waiter.kill()  # a client waiting for the answer: its request stands
            waiter.wait()
    elif op == "broker_outage":
        world.count_fault(op)
        world.bounce_broker(a["seconds"])
        world._outcome(name, "done", f"the broker away {a['seconds']} s", started)
    elif op == "scrape":
        text = scrape(world)
        world._outcome(name, "done", "no service answers" if text is None else f"{len(text)} bytes", started)
    elif op == "dagster":
        dagster_job(world, name, a["job"])
    elif op in ("redeploy", "rollback", "crash"):
        _redeploy(world, step, name)
    elif op == "drop_previous":
        world.commands["redeploy --drop-previous"] = world.commands.get("redeploy --drop-previous", 0) + 1
        world.cli(name, ["redeploy", "--drop-previous"])
    elif op == "register":
        readable = a["version"] != "text_amount"
        world.count_fault(f"register {'a compatible' if readable else 'an unreadable'} version"
                          + (" while streaming" if _stream_pid(world) else ""))
        world._outcome(name, "done", f"id {world.registry.register(a['version'])}", started)
    elif op == "registry_down":
        world.count_fault(op)
        world.registry.down(a["seconds"])
        world._outcome(name, "done", f"the registry away {a['seconds']} s", started)
    elif op == "delete_subject":
        world.count_fault(op)
        world.registry.soft_delete()
        world._outcome(name, "done", "soft-deleted", started)
    else:
        raise ValueError(f"unknown step {op}")


def _until(condition, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not condition():
        time.sleep(0.5)


def _rebasing(world: World) -> bool:
    """The newest log entry is a rebase's pause or its tiles run's start."""
    from switchyard.state_handoff.control.lifecycle import Status

    last = PipelineView.read(world.tables).last
    return last is not None and last.status in (Status.PAUSED, Status.BACKFILL_STARTED)


def _redeploy(world: World, step, name: str) -> None:
    """`switchyard redeploy` under the other definition (or `rollback` under the one the last redeploy replaced),
    in a process of its own, killed at a crash point when one is armed; then the services an operator deploys with
    the changed code: started again under the definition now recorded."""
    op, a = step.op, step.args
    to = a.get("to") or ("plus_one" if recorded_definition(world) == "demo" else "demo")
    command = ["rollback" if op == "rollback" else "redeploy", "--timeout", "240"]
    env = None
    if op == "crash":
        world.count_fault(f"crash {a['point'].split(':')[0]} (redeploy)")
        env = {"SWITCHYARD_FAULT": a["point"]}
    world.run_process(name, command, env=env, timeout=900, pipeline_ref=DEFINITIONS[to])
    if world.live is not None and world.live.poll() is not None:
        world.live = None  # the redeploy stopped the live stream
    if running_services(world):
        restart_services(world, f"{name}: the services deployed again")
    else:
        world.definition = recorded_definition(world)
