"""A Spark standalone cluster for a test module: a master and two workers on free 127.0.0.1 ports, the second worker
working in a folder outside the checkout, stopped (no JVM left) when the module ends. A test asks for
the `spark_cluster` fixture (registered in tests/conftest.py) and runs commands on it through `run_cli`."""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from switchyard.deploy import spark_cluster as standalone
from switchyard.deploy.local_server import free_port
from switchyard.deploy.paths import PROJECT_ROOT

SWITCHYARD = str(PROJECT_ROOT / ".venv" / "bin" / "switchyard")


@dataclass(frozen=True)
class RunningCluster:
    cluster: standalone.Cluster
    elsewhere: Path  # worker 2's work folder, outside the checkout

    @property
    def master_url(self) -> str:
        return self.cluster.master_url

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a `switchyard` command that runs its Spark work on this cluster."""
        return {**os.environ, "SWITCHYARD_SPARK_MASTER": self.master_url, "SWITCHYARD_SPARK_PROFILE": "test",
                "SWITCHYARD_DRIVER_MEMORY": "1g", **extra}


def run_cli(args: list[str], env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([SWITCHYARD, *args], env=env, cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout)


def processes_of(cluster: standalone.Cluster, *folders: Path) -> list[str]:
    """Processes naming the cluster's home or working in one of `folders`, told apart from the project's own code."""
    roots = [str(cluster.home.resolve())] + [str(f.resolve()) for f in folders]
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(proc / "cwd")
            state = (proc / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and (any(r in cmdline for r in roots) or any(cwd.startswith(r) for r in roots)):
            found.append(f"{proc.name}: {cmdline[:160]}")
    return found


@pytest.fixture(scope="module")
def spark_cluster(tmp_path_factory):
    """Master + 2 workers (1 core, 1g each). The home is where `switchyard dev spark --port P` looks for it."""
    cluster = standalone.Cluster.at(free_port())
    elsewhere = tmp_path_factory.mktemp("worker-2-work")
    try:
        standalone.start(cluster, workers=2, cores=1, memory="1g", work_dirs={2: elsewhere})
        yield RunningCluster(cluster, elsewhere)
    finally:
        standalone.stop(cluster)
        shutil.rmtree(cluster.home, ignore_errors=True)
