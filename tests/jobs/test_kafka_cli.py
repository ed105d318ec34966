"""`switchyard dev kafka start|stop|status` and the one-line errors of a bad environment (exit code 2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.ports import free_port_pair

SWITCHYARD = [sys.executable, "-m", "switchyard.jobs.cli"]
ROOT = Path(__file__).resolve().parents[2]


def cli(*args, env=None, timeout=180):
    return subprocess.run([*SWITCHYARD, *args], capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def _assert_one_line_error(result, *needles):
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def own_home(tmp_path):
    """A throwaway SWITCHYARD_HOME that reuses the fetched jars."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "jars").symlink_to(ROOT / ".switchyard" / "jars")
    return {**os.environ, "SWITCHYARD_HOME": str(home)}


def test_start_twice_status_stop_twice(own_home):
    port = str(free_port_pair())
    first = cli("dev", "kafka", "start", "--port", port, env=own_home)
    assert first.returncode == 0 and "started" in first.stdout, first
    try:
        second = cli("dev", "kafka", "start", "--port", port, env=own_home)
        assert second.returncode == 0 and "already running" in second.stdout
        assert cli("dev", "kafka", "status", "--port", port, env=own_home).returncode == 0
    finally:
        stopped = cli("dev", "kafka", "stop", "--port", port, env=own_home)
    assert stopped.returncode == 0 and "stopped" in stopped.stdout
    pid = int(first.stdout.split("pid ")[1].split(")")[0])
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[-1][:3]
    again = cli("dev", "kafka", "stop", "--port", port, env=own_home)
    assert again.returncode == 0 and "not running" in again.stdout
    down = cli("dev", "kafka", "status", "--port", port, env=own_home)
    assert down.returncode != 0


def test_port_in_use_is_named(own_home):
    port = free_port_pair()
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", port))
        squatter.listen()
        result = cli("dev", "kafka", "start", "--port", str(port), env=own_home)
    _assert_one_line_error(result, f"port {port}", "in use")


def test_broker_that_fails_to_start_points_at_its_log(own_home):
    port = free_port_pair()
    data = Path(own_home["SWITCHYARD_HOME"]) / "kafka" / str(port) / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("version=1\ncluster.id=abc\nnode.id=99\n")  # wrong node id
    result = cli("dev", "kafka", "start", "--port", str(port), env=own_home)
    _assert_one_line_error(result, "server.log")


def test_java_missing(own_home, tmp_path):
    env = {**own_home, "PATH": str(tmp_path), "JAVA_HOME": str(tmp_path / "nojava")}
    result = cli("dev", "kafka", "start", "--port", str(free_port_pair()), env=env)
    _assert_one_line_error(result, "java not found", "Java 17")


def test_java_too_old(own_home, tmp_path):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "java").write_text('#!/bin/sh\necho \'openjdk version "11.0.21" 2023-10-17\' >&2\n')
    (fake / "java").chmod(0o755)
    env = {**own_home, "PATH": f"{fake}:/usr/bin:/bin", "JAVA_HOME": ""}
    result = cli("dev", "kafka", "start", "--port", str(free_port_pair()), env=env)
    _assert_one_line_error(result, "Java 11", "too old")


def _setup(env):
    return subprocess.run(["bash", str(ROOT / "deploy" / "setup.sh")], capture_output=True, text=True, env=env, timeout=600)


def test_setup_without_mvn_names_it(own_home, tmp_path):
    (Path(own_home["SWITCHYARD_HOME"]) / "jars").unlink()  # nothing fetched yet in this home
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("java", "bash", "sed", "head", "dirname", "rm", "mkdir", "touch", "grep", "mktemp"):
        real = subprocess.run(["which", tool], capture_output=True, text=True).stdout.strip()
        (bindir / tool).symlink_to(real)
    result = _setup({**own_home, "PATH": str(bindir)})
    assert result.returncode == 2
    assert "mvn not found" in result.stderr


def test_setup_names_an_artifact_that_cannot_be_fetched(own_home, tmp_path):
    (Path(own_home["SWITCHYARD_HOME"]) / "jars").unlink()
    pom = tmp_path / "pom.xml"
    pom.write_text((ROOT / "deploy" / "pom.xml").read_text().replace(
        "<kafka.broker.version>", "<kafka.broker.version>0.0.0-no-such-"))
    result = _setup({**own_home, "SWITCHYARD_POM": str(pom)})
    assert result.returncode == 2, result
    assert "kafka_2.13" in result.stderr and "0.0.0-no-such-" in result.stderr, result.stderr
