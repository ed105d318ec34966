"""A real single-node KRaft Kafka broker on 127.0.0.1, from Apache's jars, run in the background."""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from deploy.jars import kafka_classpath
from deploy.java import check_java
from deploy.paths import kafka_home
from state_handoff.errors import UserError

HOST = "127.0.0.1"
HEAP = "512m"
START_TIMEOUT_S = 90
STOP_TIMEOUT_S = 30

_LOG4J = """\
log4j.rootLogger=INFO, file
log4j.appender.file=org.apache.log4j.RollingFileAppender
log4j.appender.file.File={log}
log4j.appender.file.MaxFileSize=20MB
log4j.appender.file.MaxBackupIndex=2
log4j.appender.file.layout=org.apache.log4j.PatternLayout
log4j.appender.file.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka=INFO
log4j.logger.org.apache.kafka=INFO
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.log.LogCleaner=WARN
"""


@dataclass(frozen=True)
class Broker:
    """The files of the broker that listens on `port` (controller on port + 1)."""

    port: int
    home: Path

    @classmethod
    def at(cls, port: int, home: Path | None = None) -> "Broker":
        return cls(port, Path(home) if home else kafka_home(port))

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def controller_port(self) -> int:
        return self.port + 1

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config_file(self) -> Path:
        return self.home / "server.properties"

    @property
    def pid_file(self) -> Path:
        return self.home / "broker.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "server.log"

    @property
    def console_file(self) -> Path:
        return self.home / "logs" / "console.out"


def _config(broker: Broker) -> str:
    return f"""\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{broker.controller_port}
listeners=PLAINTEXT://{HOST}:{broker.port},CONTROLLER://{HOST}:{broker.controller_port}
advertised.listeners=PLAINTEXT://{HOST}:{broker.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs={broker.data_dir}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
# Generated events carry historical event times; never expire a topic behind the user's back.
log.retention.ms=-1
log.segment.bytes=67108864
"""


def _port_accepts(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((HOST, port)) == 0


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
        return True


def _pid(broker: Broker) -> int | None:
    """The pid of the broker this project started, if that process still runs."""
    try:
        pid = int(broker.pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except FileNotFoundError:
        return None
    if "kafka.Kafka" not in cmdline or str(broker.config_file) not in cmdline:
        return None  # the pid was reused by another process
    return pid


def _broker_answers(broker: Broker) -> bool:
    """True once the broker serves metadata, not merely accepts TCP."""
    if not _port_accepts(broker.port):
        return False
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=3000,
                                 api_version_auto_timeout_ms=3000)
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


def is_up(broker: Broker) -> bool:
    return _pid(broker) is not None and _broker_answers(broker)


def _format_storage(broker: Broker, java: str) -> None:
    if (broker.data_dir / "meta.properties").exists():
        return
    cluster_id = "-"
    while cluster_id.startswith("-"):  # the storage tool reads a leading '-' as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    result = subprocess.run(
        [java, "-Xmx256m", "-cp", kafka_classpath(), f"-Dlog4j.configuration=file:{broker.home / 'log4j.properties'}",
         "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(broker.config_file)],
        capture_output=True, text=True,
    )
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"formatting Kafka storage in {broker.data_dir} failed: {detail[0]}")


def start(broker: Broker) -> str:
    """Start the broker (idempotent); return a one-line description."""
    if _pid(broker) is not None:
        _wait_until_up(broker, subprocess_handle=None)
        return f"kafka already running on {broker.bootstrap} (pid {_pid(broker)})"
    for port in (broker.port, broker.controller_port):
        if not _port_free(port):
            raise UserError(f"port {port} on {HOST} is already in use: stop what holds it or pick another --port")
    java = check_java()
    (broker.home / "logs").mkdir(parents=True, exist_ok=True)
    broker.config_file.write_text(_config(broker))
    (broker.home / "log4j.properties").write_text(_LOG4J.format(log=broker.log_file))
    _format_storage(broker, java)
    with open(broker.console_file, "ab") as console:
        proc = subprocess.Popen(
            [java, f"-Xmx{HEAP}", f"-Xms{HEAP}", "-XX:+UseG1GC", "-Djava.awt.headless=true",
             f"-Dlog4j.configuration=file:{broker.home / 'log4j.properties'}",
             f"-Dkafka.logs.dir={broker.home / 'logs'}",
             "-cp", kafka_classpath(), "kafka.Kafka", str(broker.config_file)],
            stdout=console, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, cwd=broker.home,
        )
    broker.pid_file.write_text(str(proc.pid))
    _wait_until_up(broker, proc)
    return f"kafka started on {broker.bootstrap} (pid {proc.pid}); logs in {broker.log_file}"


def _wait_until_up(broker: Broker, subprocess_handle: subprocess.Popen | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if _broker_answers(broker):
            return
        if subprocess_handle is not None and subprocess_handle.poll() is not None:
            broker.pid_file.unlink(missing_ok=True)
            raise UserError(f"kafka broker exited with code {subprocess_handle.returncode} while starting: see {broker.log_file} and {broker.console_file}")
        time.sleep(0.5)
    raise UserError(f"kafka broker did not answer on {broker.bootstrap} within {START_TIMEOUT_S}s: see {broker.log_file}")


def stop(broker: Broker) -> str:
    """Stop the broker this project started, by pid, and wait for it to exit."""
    pid = _pid(broker)
    if pid is None:
        broker.pid_file.unlink(missing_ok=True)
        return f"kafka on {broker.bootstrap} is not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
        time.sleep(0.2)
    if Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
        os.kill(pid, signal.SIGKILL)
        while Path(f"/proc/{pid}").exists() and not _is_zombie(pid):
            time.sleep(0.1)
    broker.pid_file.unlink(missing_ok=True)
    return f"kafka on {broker.bootstrap} stopped (pid {pid})"


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except (FileNotFoundError, IndexError):
        return True


def status(broker: Broker) -> tuple[bool, str]:
    pid = _pid(broker)
    if pid is None:
        return False, f"kafka on {broker.bootstrap} is not running"
    if not _broker_answers(broker):
        return False, f"kafka process {pid} runs but does not answer on {broker.bootstrap}: see {broker.log_file}"
    return True, f"kafka is up on {broker.bootstrap} (pid {pid})"
