"""A Spark standalone cluster on 127.0.0.1 (one master, N workers) from pyspark's own `bin/spark-class`, run in the
background and tracked by pid (deploy/local_server.py); each daemon's record also keeps its ports and settings."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from switchyard.deploy import local_server
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST
from switchyard.deploy.paths import spark_cluster_home
from switchyard.state_handoff.control import processes
from switchyard.state_handoff.errors import UserError

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_HEAP = "512m"  # the master's and each worker's own JVM; executors get the worker's --memory
START_TIMEOUT_S = 180  # JVMs start slowly on a busy machine
STOP_TIMEOUT_S = 30


@dataclass(frozen=True)
class Worker:
    """Worker `number` of a cluster: its files under the cluster's home, its executors' folders under `work_dir`."""

    number: int
    home: Path
    work_dir: Path

    @property
    def record(self) -> Path:
        return self.home / "worker.json"

    @property
    def log_file(self) -> Path:
        return self.home / "worker.out"


@dataclass(frozen=True)
class Cluster:
    """The files of the cluster whose master listens on `port`."""

    port: int
    home: Path

    @classmethod
    def at(cls, port: int, home: Path | None = None) -> "Cluster":
        return cls(port, Path(home) if home else spark_cluster_home(port))

    @property
    def master_url(self) -> str:
        return f"spark://{HOST}:{self.port}"

    @property
    def master_record(self) -> Path:
        return self.home / "master.json"

    @property
    def master_log(self) -> Path:
        return self.home / "master.out"

    def worker(self, number: int, work_dir: Path | None = None) -> Worker:
        home = self.home / f"worker-{number}"
        recorded = _read(home / "worker.json").get("work_dir")
        return Worker(number, home, Path(work_dir or recorded or home / "work"))

    def workers(self) -> list[Worker]:
        """Every worker this cluster's home has a record of."""
        numbers = sorted(int(p.name.split("-", 1)[1]) for p in self.home.glob("worker-*") if p.name[7:].isdigit())
        return [self.worker(n) for n in numbers]


def _read(record: Path) -> dict:
    try:
        return json.loads(record.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def _write(record: Path, fields: dict) -> None:
    tmp = record.with_suffix(".tmp")
    tmp.write_text(json.dumps(fields))
    os.replace(tmp, record)


def _running(record: Path, *markers: str) -> int | None:
    """The recorded pid, if that process still runs and is the one we started (its command line has `markers`)."""
    return local_server.started_pid(_read(record).get("pid"), *markers)


def master_pid(cluster: Cluster) -> int | None:
    return _running(cluster.master_record, MASTER_CLASS, str(cluster.home / "master.conf"))


def worker_pid(cluster: Cluster, worker: Worker) -> int | None:
    return _running(worker.record, WORKER_CLASS, str(worker.home / "worker.conf"), cluster.master_url)


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _launch(cluster: Cluster, args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    check_java()  # spark-class runs JAVA_HOME's java, else the one on PATH: the same one check_java found
    conf_dir = cluster.home / "conf"  # empty: no spark-env.sh or defaults from elsewhere leak in
    conf_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(_spark_home()), "SPARK_CONF_DIR": str(conf_dir),
           "SPARK_LOCAL_IP": HOST,  # RPC and web UIs bind to loopback; executors inherit it
           "SPARK_DAEMON_MEMORY": DAEMON_HEAP}
    cwd.mkdir(parents=True, exist_ok=True)
    return local_server.launch([str(_spark_home() / "bin" / "spark-class"), *args], log, cwd, env)


def master_state(cluster: Cluster) -> dict | None:
    """The master's own view (its web UI's JSON: status, workers with their state), or None if it does not answer."""
    port = _read(cluster.master_record).get("webui_port")
    if not port:
        return None
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/json/", timeout=3) as response:
            return json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _alive_worker_ports(cluster: Cluster) -> set[int]:
    state = master_state(cluster) or {}
    return {w.get("port") for w in state.get("workers", []) if w.get("state") == "ALIVE"}


def _wait(what: str, ready, procs: list[tuple[subprocess.Popen, Path]]) -> None:
    exited = [(proc, f"{what} exited with code {{code}} while starting: see {log}") for proc, log in procs]
    if local_server.wait_until_ready(ready, START_TIMEOUT_S, exited):
        return
    raise UserError(f"{what} not up within {START_TIMEOUT_S}s: see {procs[0][1] if procs else 'the logs'}")


def start(cluster: Cluster, workers: int = 2, cores: int = 1, memory: str = "2g", webui_port: int | None = None,
          work_dirs: dict[int, Path] | None = None) -> str:
    """Start the master and workers 1..`workers` that do not run yet (idempotent); return what runs.
    `work_dirs` puts a worker's executor folders elsewhere (default: under the cluster's home)."""
    if workers < 1 or cores < 1:
        raise UserError("--workers and --cores must be at least 1")
    cluster.home.mkdir(parents=True, exist_ok=True)
    lines = []
    if master_pid(cluster) is None:
        webui_port = webui_port or local_server.free_port()
        for port, option in ((cluster.port, "--port"), (webui_port, "--webui-port")):
            local_server.check_ports_free([port], option)
        conf = cluster.home / "master.conf"
        conf.write_text("spark.master.rest.enabled false\n")
        proc = _launch(cluster, [MASTER_CLASS, "--host", HOST, "--port", str(cluster.port),
                                 "--webui-port", str(webui_port), "--properties-file", str(conf)],
                       cluster.home, cluster.master_log)
        _write(cluster.master_record, {"pid": proc.pid, "webui_port": webui_port})
        _wait(f"spark master on {cluster.master_url}", lambda: (master_state(cluster) or {}).get("status") == "ALIVE",
              [(proc, cluster.master_log)])
        lines.append(f"spark master started on {cluster.master_url} (pid {proc.pid})")
    else:
        lines.append(f"spark master already running on {cluster.master_url} (pid {master_pid(cluster)})")

    starting, already = [], 0
    for number in range(1, workers + 1):
        worker = cluster.worker(number, (work_dirs or {}).get(number))
        if worker_pid(cluster, worker) is not None:
            already += 1
            continue
        worker.home.mkdir(parents=True, exist_ok=True)
        port, ui_port = local_server.free_port(), local_server.free_port()
        conf = worker.home / "worker.conf"
        # Folders of finished applications go after a day; running ones are never touched.
        conf.write_text("spark.worker.cleanup.enabled true\nspark.worker.cleanup.appDataTtl 86400\n")
        proc = _launch(cluster, [WORKER_CLASS, "--host", HOST, "--port", str(port), "--webui-port", str(ui_port),
                                 "--cores", str(cores), "--memory", memory, "--work-dir", str(worker.work_dir),
                                 "--properties-file", str(conf), cluster.master_url],
                       worker.home, worker.log_file)
        _write(worker.record, {"pid": proc.pid, "port": port, "webui_port": ui_port, "cores": cores,
                               "memory": memory, "work_dir": str(worker.work_dir)})
        starting.append((worker, port, proc))
    if starting:
        ports = {port for _, port, _ in starting}
        _wait(f"{len(starting)} spark worker(s) registering with {cluster.master_url}",
              lambda: ports <= _alive_worker_ports(cluster), [(p, w.log_file) for w, _, p in starting])
        lines.append(f"{len(starting)} worker(s) started ({cores} core(s), {memory} each), "
                     f"work folders {', '.join(str(w.work_dir) for w, _, _ in starting)}")
    if already:
        lines.append(f"{already} worker(s) already running")
    lines.append(f"master URL: {cluster.master_url}  (export SWITCHYARD_SPARK_MASTER={cluster.master_url})")
    return "\n".join(lines)


# What a worker leaves running in its work folder: executors and their Python workers.
_EXECUTOR_MARKERS = ("CoarseGrainedExecutorBackend", "pyspark.daemon", "pyspark.worker")


def leftover_processes(cluster: Cluster) -> list[int]:
    """Executors (and their Python workers) still running in this cluster's work folders."""
    roots = [str(w.work_dir.resolve()) for w in cluster.workers()]
    found = []
    for pid in processes.pids():
        cwd = processes.working_folder(pid)
        if cwd is None:
            continue
        if any(cwd == r or cwd.startswith(r + os.sep) for r in roots) and processes.process_alive(pid) \
                and any(m in processes.command_line(pid) for m in _EXECUTOR_MARKERS):
            found.append(pid)
    return found


def stop(cluster: Cluster) -> str:
    """Stop the workers (their executors with them), then the master, by pid; then any executor left behind."""
    stopped = []
    for worker in cluster.workers():
        pid = worker_pid(cluster, worker)
        if pid is not None:
            local_server.terminate(pid, STOP_TIMEOUT_S)
            stopped.append(f"worker-{worker.number} (pid {pid})")
    pid = master_pid(cluster)
    if pid is not None:
        local_server.terminate(pid, STOP_TIMEOUT_S)
        stopped.append(f"master (pid {pid})")
    # A worker kills its executors as it stops; one stopped hard leaves them to notice on their own, so do not wait.
    for leftover in leftover_processes(cluster):
        local_server.terminate(leftover, STOP_TIMEOUT_S)
        stopped.append(f"leftover executor process {leftover}")
    if not stopped:
        return f"spark cluster on {cluster.master_url} is not running"
    return f"spark cluster on {cluster.master_url} stopped: {', '.join(stopped)}"


def status(cluster: Cluster) -> tuple[bool, str]:
    """(True, what runs) when the master and at least one worker are up and every running worker is registered."""
    pid = master_pid(cluster)
    running = [(w, worker_pid(cluster, w)) for w in cluster.workers()]
    running = [(w, p) for w, p in running if p is not None]
    if pid is None:
        extra = f" ({len(running)} worker(s) without it: run `switchyard dev spark stop`)" if running else ""
        return False, f"spark master on {cluster.master_url} is not running{extra}"
    state = master_state(cluster)
    if state is None or state.get("status") != "ALIVE":
        return False, f"spark master process {pid} runs but does not answer: see {cluster.master_log}"
    alive = _alive_worker_ports(cluster)
    lines = [f"spark master is up on {cluster.master_url} (pid {pid}, web UI "
             f"http://{HOST}:{_read(cluster.master_record)['webui_port']})"]
    for worker, wpid in running:
        record = _read(worker.record)
        registered = record.get("port") in alive
        lines.append(f"  worker-{worker.number}: pid {wpid}, {record.get('cores')} core(s), {record.get('memory')}, "
                     f"{'ALIVE' if registered else 'not registered: see ' + str(worker.log_file)}, "
                     f"work folder {worker.work_dir}")
    apps = [a.get("name", "?") for a in state.get("activeapps", [])]
    lines.append(f"  {len(running)} worker(s) running; {len(apps)} application(s)"
                 + (f": {', '.join(apps)}" if apps else ""))
    healthy = bool(running) and all(_read(w.record).get("port") in alive for w, _ in running)
    return healthy, "\n".join(lines)
