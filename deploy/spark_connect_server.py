"""A local Spark Connect server on 127.0.0.1, from pyspark's own distribution (its spark-submit and spark-connect
jar) with switchyard's jars and Delta's extension: the kind of server a Connect-only platform gives, for the tests
that run the batch commands over Spark Connect. Started in the background and tracked by pid
(deploy/local_server.py)."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from switchyard.deploy import local_server
from switchyard.deploy.jars import spark_extra_jars
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST
from switchyard.deploy.paths import runtime_home
from switchyard.deploy.spark import PROFILES
from switchyard.state_handoff.errors import UserError

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_TIMEOUT_S = 180
STOP_TIMEOUT_S = 30
LOG_CONFIG = Path(__file__).with_name("log4j2.properties")


@dataclass(frozen=True)
class Server:
    """The files of the server that listens on `port`."""

    port: int
    home: Path

    @classmethod
    def at(cls, port: int, home: Path | None = None) -> "Server":
        return cls(port, Path(home) if home else runtime_home() / "spark-connect" / str(port))

    @property
    def url(self) -> str:
        """What SPARK_REMOTE names to reach it."""
        return f"sc://{HOST}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.home / "server.out"

    @property
    def pid_file(self) -> local_server.PidFile:
        return local_server.PidFile(self.home / "server.pid",
                                    (SERVER_CLASS, f"spark.connect.grpc.binding.port={self.port}"))


def server_conf(server: Server, profile: str = "test") -> dict[str, str]:
    """The server's driver: switchyard's jars, Delta's extension and catalog, UTC, the profile's sizes; gRPC on
    loopback only."""
    jars = spark_extra_jars()
    return {
        "spark.connect.grpc.binding.address": HOST,
        "spark.connect.grpc.binding.port": str(server.port),
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        **({"spark.jars": ",".join(map(str, jars))} if jars else {}),
        "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
        "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}",  # warnings and errors
        **PROFILES[profile],
    }


def start(server: Server, master: str = "local[2]", python: str = sys.executable, profile: str = "test") -> str:
    """Start the server unless it runs (idempotent). Python UDFs run on the server, in `python`: an interpreter
    with switchyard installed."""
    import pyspark

    if server.pid_file.running() is not None:
        return f"spark connect server already running on {server.url}"
    check_java()
    local_server.check_ports_free([server.port])
    server.home.mkdir(parents=True, exist_ok=True)
    conf_dir = server.home / "conf"  # empty: no spark-defaults.conf from elsewhere leaks in
    conf_dir.mkdir(exist_ok=True)
    spark_home = Path(pyspark.__file__).parent
    command = [str(spark_home / "bin" / "spark-submit"), "--class", SERVER_CLASS, "--master", master,
               "--name", "switchyard-connect-server"]
    for key, value in server_conf(server, profile).items():
        command += ["--conf", f"{key}={value}"]
    env = {key: value for key, value in os.environ.items() if key not in ("SPARK_REMOTE", "PYSPARK_SUBMIT_ARGS")}
    env.update({"SPARK_HOME": str(spark_home), "SPARK_CONF_DIR": str(conf_dir), "SPARK_LOCAL_IP": HOST,
                "PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python})
    process = local_server.launch(command, server.log_file, server.home, env)
    server.pid_file.record(process.pid)
    if not server.pid_file.wait_until_ready(lambda: local_server.port_accepts(server.port), START_TIMEOUT_S, process,
                                            f"spark connect server exited with code {{code}} while starting: see "
                                            f"{server.log_file}"):
        server.pid_file.stop(STOP_TIMEOUT_S)
        raise UserError(f"spark connect server not up on {server.url} within {START_TIMEOUT_S}s: see "
                        f"{server.log_file}")
    return f"spark connect server started on {server.url} (pid {process.pid})"


def stop(server: Server) -> str:
    pid = server.pid_file.stop(STOP_TIMEOUT_S)
    if pid is None:
        return f"spark connect server on {server.url} is not running"
    return f"spark connect server on {server.url} stopped (pid {pid})"
