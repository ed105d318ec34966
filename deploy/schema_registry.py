"""A real Confluent-compatible schema registry on 127.0.0.1: Apicurio Registry (in-memory storage), built once
from Maven Central by deploy/registry/pom.xml into <home>/build and run in the background. Clients speak the
Confluent API at `url(port)`; every schema is gone when it stops."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from switchyard.deploy import local_server
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST, free_port
from switchyard.deploy.paths import runtime_home
from switchyard.state_handoff.errors import UserError

__all__ = ["build", "default_home", "free_port", "runnable_jar", "start", "stop", "url"]

POM = Path(__file__).resolve().parent / "registry" / "pom.xml"
SETTINGS = Path(__file__).resolve().parent / "maven-settings.xml"  # every repository routed to Maven Central
HEAP = "256m"
START_TIMEOUT_S = 120
STOP_TIMEOUT_S = 30
# mvn's first error line, without the "Failed to execute goal ... on project ...:" that starts most of them
_MVN_ERROR = re.compile(r"^\[ERROR\] (?:Failed to execute goal (?:.*? )?on project [\w.-]+: )?(\S.*)$", re.MULTILINE)


def default_home() -> Path:
    """The registry's folder in the project's home (SWITCHYARD_HOME/registry): its build and its log."""
    return runtime_home() / "registry"


def runnable_jar(home: Path) -> Path:
    """The jar `build` makes (Quarkus' legacy jar: it loads its libraries from lib/ beside it)."""
    return Path(home) / "build" / "apicurio-registry-runner.jar"


def url(port: int) -> str:
    """The base URL of the Confluent-compatible API (what a Confluent client takes as `url`)."""
    return f"http://{HOST}:{port}/apis/ccompat/v7"


def build(home: Path) -> Path:
    """Build the registry with mvn into <home>/build, unless its jar is there and newer than the pom; the jar.
    A failed build raises a one-line UserError naming the first error and the full log (<home>/build.log)."""
    home, jar = Path(home), runnable_jar(home)
    if jar.is_file() and (not POM.is_file() or jar.stat().st_mtime >= POM.stat().st_mtime):
        return jar
    if not POM.is_file():
        raise UserError(f"{POM} is missing: the schema registry is built from a checkout of switchyard")
    shutil.rmtree(jar.parent, ignore_errors=True)  # no jar of an older build left in lib/
    home.mkdir(parents=True, exist_ok=True)
    log = home / "build.log"
    print(f"schema registry: building Apicurio Registry with mvn into {jar.parent} (the first build downloads "
          f"about 210 MB from Maven Central)", file=sys.stderr, flush=True)
    command = ["mvn", "-B", "-s", str(SETTINGS), "-f", str(POM), f"-Dregistry.out={jar.parent}", "package"]
    try:
        with open(log, "wb") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode
    except FileNotFoundError:
        raise UserError("mvn not found: install Maven (apt-get install maven) to build the schema registry") from None
    if code != 0 or not jar.is_file():
        found = _MVN_ERROR.search(log.read_text(errors="replace"))
        reason = found.group(1).strip() if found else f"exit code {code}"
        raise UserError(f"mvn could not build the schema registry: {reason[:400]} (see {log})")
    return jar


def _answers(port: int) -> bool:
    """True once the Confluent API lists subjects."""
    try:
        with urllib.request.urlopen(f"{url(port)}/subjects", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _tail(log: Path, lines: int = 20) -> str:
    """The last `lines` lines of `log`."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


def start(home: Path, port: int) -> subprocess.Popen:
    """Start the built registry on 127.0.0.1:`port` (its HTTP listener on that address only), its output appended
    to <home>/registry.log; return once its Confluent API answers, or raise with the log's tail."""
    home, jar = Path(home), runnable_jar(home)
    if not jar.is_file():
        raise UserError(f"the schema registry is not built ({jar} is missing): call build({home}) first")
    local_server.check_ports_free([port])
    log = home / "registry.log"
    command = [check_java(), f"-Xmx{HEAP}", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
               f"-Dquarkus.http.host={HOST}", f"-Dquarkus.http.port={port}", "-jar", str(jar)]
    proc = local_server.launch(command, log, home)
    exited = f"the schema registry exited with code {{code}} while starting; the end of {log}:"
    try:
        ready = local_server.wait_until_ready(lambda: _answers(port), START_TIMEOUT_S, [(proc, exited)])
    except UserError as error:
        raise UserError(f"{error}\n{_tail(log)}") from None
    if not ready:
        stop(proc)
        raise UserError(f"the schema registry did not answer on {url(port)} within {START_TIMEOUT_S} s; "
                        f"the end of {log}:\n{_tail(log)}")
    return proc


def stop(proc: subprocess.Popen) -> None:
    """Stop the registry `start` returned: SIGTERM, SIGKILL after STOP_TIMEOUT_S; returns once it has exited."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":  # python -m switchyard.deploy.schema_registry [PORT]: build, start, run until Ctrl-C
    chosen = int(sys.argv[1]) if len(sys.argv) > 1 else free_port()
    build(default_home())
    registry = start(default_home(), chosen)
    print(f"schema registry (pid {registry.pid}) answering at {url(chosen)}; Ctrl-C stops it", flush=True)
    try:
        registry.wait()
    except KeyboardInterrupt:
        stop(registry)
