"""Where switchyard keeps what it fetches and runs: one git-ignored folder per checkout."""

from __future__ import annotations

from pathlib import Path

from switchyard.state_handoff import settings

PROJECT_ROOT = Path(__file__).resolve().parents[1]


def runtime_home() -> Path:
    """Fetched jars, the local broker's data and logs (SWITCHYARD_HOME, a relative one from the checkout)."""
    return settings.value("SWITCHYARD_HOME")


def jar_dir(profile: str) -> Path:
    return runtime_home() / "jars" / profile


def kafka_home(port: int) -> Path:
    return runtime_home() / "kafka" / str(port)


def kafka_cluster_home(port: int) -> Path:
    return runtime_home() / "kafka" / f"cluster-{port}"


def spark_cluster_home(port: int) -> Path:
    """A local standalone cluster's pid records, logs and (by default) its workers' work folders."""
    return runtime_home() / "spark" / str(port)


def shipped_code_dir() -> Path:
    """The zips of the project's Python code that sessions on a cluster ship to executors."""
    return runtime_home() / "spark" / "code"


def objectstore_home(port: int) -> Path:
    """A local object store's configuration and log."""
    return runtime_home() / "objectstore" / str(port)
