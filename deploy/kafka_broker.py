"""A real KRaft Kafka node (broker and controller in one process) on 127.0.0.1, from Apache's jars, run in the
background: alone (the default single broker) or as one node of a cluster (deploy/kafka_cluster.py), optionally
with a SASL/SCRAM listener whose credentials come from the SWITCHYARD_KAFKA_* settings."""

from __future__ import annotations

import base64
import os
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from switchyard.deploy import local_server
from switchyard.deploy.jars import kafka_classpath
from switchyard.deploy.java import check_java
from switchyard.deploy.local_server import HOST
from switchyard.deploy.paths import kafka_home
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_security

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
class Tls:
    """A TLS listener that asks every client for a certificate (mutual TLS): the broker's key and certificate, and
    the CA certificates it trusts, as PEM files."""

    keystore: Path  # the broker's private key (PKCS#8) and certificate
    truststore: Path  # the CA certificates that sign the brokers' and clients' certificates


@dataclass(frozen=True)
class Oidc:
    """OAUTHBEARER beside SCRAM on the SASL listener: clients log in with tokens of an OpenID Connect provider, which
    the broker checks against the provider's keys (`jwks_url`) and audience."""

    jwks_url: str
    audience: str

    @property
    def jvm_flag(self) -> str:
        """Kafka's clients and brokers fetch only the OAuth URLs a system property allows."""
        return f"-D{OAUTH_ALLOWED_URLS}={self.jwks_url}"


OAUTH_ALLOWED_URLS = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
_OAUTH_MODULE = "org.apache.kafka.common.security.oauthbearer"


@dataclass(frozen=True)
class Broker:
    """The files of the node whose broker listens on `port` (controller on port + 1); alone unless `voters`
    names the controller quorum of a cluster of `cluster_size` nodes."""

    port: int
    home: Path
    node_id: int = 1
    voters: str = ""
    cluster_size: int = 1

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
    def process(self) -> local_server.PidFile:
        """The node's process, tracked by its pid file (a `kafka.Kafka` reading this node's configuration)."""
        return local_server.PidFile(self.pid_file, ("kafka.Kafka", str(self.config_file)))

    @property
    def log_file(self) -> Path:
        return self.home / "logs" / "server.log"

    @property
    def console_file(self) -> Path:
        return self.home / "logs" / "console.out"

    @property
    def sasl_file(self) -> Path:
        """Present when the storage was formatted with SCRAM credentials; holds the mechanism."""
        return self.home / "sasl.mechanism"

    @property
    def quorum_voters(self) -> str:
        return self.voters or f"{self.node_id}@{HOST}:{self.controller_port}"

    @property
    def name(self) -> str:
        return f"kafka node {self.node_id} on {self.bootstrap}" if self.voters else f"kafka on {self.bootstrap}"


def _config(broker: Broker, sasl: kafka_security.KafkaSecurity | None, acls: bool = False,
            tls: Tls | None = None, oidc: Oidc | None = None) -> str:
    listener = "SASL_PLAINTEXT" if sasl else "SSL" if tls else "PLAINTEXT"
    controller_protocol = "SASL_PLAINTEXT" if sasl else "PLAINTEXT"
    replicas = min(3, broker.cluster_size)
    return f"""\
process.roles=broker,controller
node.id={broker.node_id}
controller.quorum.voters={broker.quorum_voters}
listeners={listener}://{HOST}:{broker.port},CONTROLLER://{HOST}:{broker.controller_port}
advertised.listeners={listener}://{HOST}:{broker.port}
controller.listener.names=CONTROLLER
inter.broker.listener.name={listener}
listener.security.protocol.map=CONTROLLER:{controller_protocol},{listener}:{listener}
log.dirs={broker.data_dir}
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor={replicas}
offsets.topic.num.partitions=4
transaction.state.log.replication.factor={replicas}
transaction.state.log.min.isr={min(2, replicas)}
group.initial.rebalance.delay.ms=0
# Generated events carry historical event times; never expire a topic behind the user's back.
log.retention.ms=-1
log.segment.bytes=67108864
""" + (_CLUSTER_NODE if broker.voters else "") + (_sasl_config(sasl, oidc) if sasl else "") + (
        _acl_config(sasl) if sasl and acls else "") + (_tls_config(tls) if tls and not sasl else "")


# Three JVMs share a small machine: fewer request threads than Kafka's defaults.
_CLUSTER_NODE = """\
num.network.threads=2
num.io.threads=2
background.threads=2
"""


def _sasl_config(sasl: kafka_security.KafkaSecurity, oidc: Oidc | None = None) -> str:
    """Clients and brokers authenticate with SCRAM on the broker listener (credentials bootstrapped at format
    time); controllers, which serve before any SCRAM credential is readable, with PLAIN and the same user. With
    `oidc`, clients may log in with an OpenID Connect provider's tokens (OAUTHBEARER) instead."""
    scram_login = kafka_security.jaas_config(sasl.mechanism, sasl.username, sasl.password)
    plain_login = (kafka_security.jaas_config("PLAIN", sasl.username, sasl.password).rstrip(";")
                   + f' user_{sasl.username}="{sasl.password}";')
    oauth = f"""\
listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config={_OAUTH_MODULE}.OAuthBearerLoginModule required ;
listener.name.sasl_plaintext.oauthbearer.sasl.server.callback.handler.class=\
{_OAUTH_MODULE}.OAuthBearerValidatorCallbackHandler
sasl.oauthbearer.jwks.endpoint.url={oidc.jwks_url}
sasl.oauthbearer.expected.audience={oidc.audience}
""" if oidc else ""
    return oauth + f"""\
sasl.enabled.mechanisms={sasl.mechanism}{",OAUTHBEARER" if oidc else ""}
sasl.mechanism.inter.broker.protocol={sasl.mechanism}
listener.name.sasl_plaintext.{sasl.mechanism.lower()}.sasl.jaas.config={scram_login}
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.sasl.enabled.mechanisms=PLAIN
listener.name.controller.plain.sasl.jaas.config={plain_login}
"""


def _acl_config(sasl: kafka_security.KafkaSecurity) -> str:
    """Kafka's authorizer on: the user the broker was formatted with may do anything (the brokers and controllers
    authenticate as it); any other user only what an ACL grants it."""
    return f"""\
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
super.users=User:{sasl.username}
allow.everyone.if.no.acl.found=false
"""


def _tls_config(tls: Tls) -> str:
    return f"""\
ssl.keystore.type=PEM
ssl.keystore.location={tls.keystore}
ssl.truststore.type=PEM
ssl.truststore.location={tls.truststore}
ssl.client.auth=required
"""


def answers(bootstrap: str) -> bool:
    """True once a broker at `bootstrap` serves metadata to the project's clients, not merely accepts TCP."""
    first_port = int(bootstrap.split(",")[0].rsplit(":", 1)[1])
    if not local_server.port_accepts(first_port):
        return False
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=3000,
                                 api_version_auto_timeout_ms=3000, **kafka_security.client_kwargs())
    except (KafkaError, OSError, ValueError):
        return False
    try:
        admin.list_topics()
        return True
    except (KafkaError, OSError):
        return False
    finally:
        admin.close()


def _broker_answers(broker: Broker) -> bool:
    return answers(broker.bootstrap)


def is_up(broker: Broker) -> bool:
    return running_pid(broker) is not None and _broker_answers(broker)


def new_cluster_id() -> str:
    cluster_id = "-"
    while cluster_id.startswith("-"):  # the storage tool reads a leading '-' as an option
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    return cluster_id


def _format_storage(broker: Broker, java: str, cluster_id: str | None,
                    sasl: kafka_security.KafkaSecurity | None) -> None:
    if (broker.data_dir / "meta.properties").exists():
        return
    scram = ["--add-scram", f"{sasl.mechanism}=[name={sasl.username},password={sasl.password}]"] if sasl else []
    arguments = ["-Xmx256m", "-cp", kafka_classpath(), f"-Dlog4j.configuration=file:{broker.home / 'log4j.properties'}",
                 "kafka.tools.StorageTool", "format", "-t", cluster_id or new_cluster_id(), "-c",
                 str(broker.config_file), *scram]
    with _argument_file(broker.home / "format.args", arguments) as argument_file:
        result = subprocess.run([java, f"@{argument_file}"], capture_output=True, text=True)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise UserError(f"formatting Kafka storage in {broker.data_dir} failed: {detail[0]}")
    if sasl:
        broker.sasl_file.write_text(sasl.mechanism)


@contextmanager
def _argument_file(path: Path, arguments: list[str]) -> Iterator[Path]:
    """`arguments` in a java launcher's argument file only the user can read (`java @path`), for the block: a
    password among them stays off the command line every user of the host can list."""
    quoted = "".join('"' + argument.replace("\\", "\\\\").replace('"', '\\"') + '"\n' for argument in arguments)
    path.unlink(missing_ok=True)
    with os.fdopen(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as out:
        out.write(quoted)
    try:
        yield path
    finally:
        path.unlink(missing_ok=True)


def sasl_settings(broker: Broker, requested: bool) -> kafka_security.KafkaSecurity | None:
    """The SCRAM settings a node starts with: asked for by --sasl on fresh storage, or fixed when it was formatted."""
    formatted = (broker.data_dir / "meta.properties").exists()
    mechanism = broker.sasl_file.read_text().strip() if broker.sasl_file.exists() else None
    if formatted and requested and not mechanism:
        raise UserError(f"{broker.name} was formatted without SASL: remove {broker.home} to start it afresh with --sasl")
    if not (mechanism or (requested and not formatted)):
        return None
    security = kafka_security.from_env()
    needed = (f"set {kafka_security.PROTOCOL}=SASL_PLAINTEXT, {kafka_security.MECHANISM}="
              f"{mechanism or 'SCRAM-SHA-512'}, {kafka_security.USERNAME} and {kafka_security.PASSWORD}")
    if security.protocol != "SASL_PLAINTEXT" or security.mechanism not in kafka_security.SCRAM:
        raise UserError(f"{broker.name} {'has' if mechanism else 'asks for'} a SASL/SCRAM listener: {needed}")
    if mechanism and security.mechanism != mechanism:
        raise UserError(f"{broker.name} was formatted with {mechanism}: set {kafka_security.MECHANISM}={mechanism}")
    if not all(c.isalnum() or c in "_.-" for c in security.username + security.password):
        raise UserError(f"{kafka_security.USERNAME} and {kafka_security.PASSWORD} of a broker started here may hold "
                        "letters, digits, '_', '.' and '-' only: pick others")
    return security


def check_ports_free(broker: Broker) -> None:
    local_server.check_ports_free((broker.port, broker.controller_port))


def launch(broker: Broker, java: str, sasl_requested: bool = False, cluster_id: str | None = None,
           heap: str = HEAP, min_heap: str | None = None, jvm_flags: tuple[str, ...] = ("-XX:+UseG1GC",),
           acls: bool = False, tls: Tls | None = None, oidc: Oidc | None = None) -> subprocess.Popen:
    """Write the node's configuration, format its storage once, and start it in the background."""
    check_ports_free(broker)
    (broker.home / "logs").mkdir(parents=True, exist_ok=True)
    sasl = sasl_settings(broker, sasl_requested)
    if sasl:  # it holds the password: only the user reads it, from its first byte on
        broker.config_file.touch(mode=0o600)
        broker.config_file.chmod(0o600)
    broker.config_file.write_text(_config(broker, sasl, acls, tls, oidc))
    (broker.home / "log4j.properties").write_text(_LOG4J.format(log=broker.log_file))
    _format_storage(broker, java, cluster_id, sasl)
    proc = local_server.launch(
        [java, f"-Xmx{heap}", f"-Xms{min_heap or heap}", *jvm_flags, *([oidc.jvm_flag] if oidc else []),
         "-Djava.awt.headless=true",
         f"-Dlog4j.configuration=file:{broker.home / 'log4j.properties'}", f"-Dkafka.logs.dir={broker.home / 'logs'}",
         "-cp", kafka_classpath(), "kafka.Kafka", str(broker.config_file)],
        broker.console_file, broker.home)
    broker.process.record(proc.pid)
    return proc


def start(broker: Broker, sasl: bool = False, acls: bool = False, tls: Tls | None = None,
          oidc: Oidc | None = None) -> str:
    """Start the broker (idempotent); return a one-line description. `acls` (with `sasl`): Kafka's authorizer on,
    the broker's own user its only super user. `tls` (without `sasl`): its listener is mutual TLS. `oidc` (with
    `sasl`): OAUTHBEARER logins with an OpenID Connect provider's tokens too."""
    if running_pid(broker) is not None:
        wait_until_up(broker, subprocess_handle=None)
        return f"kafka already running on {broker.bootstrap} (pid {running_pid(broker)})"
    check_ports_free(broker)
    proc = launch(broker, check_java(), sasl, acls=acls, tls=tls, oidc=oidc)
    wait_until_up(broker, proc)
    secured = f", SASL {broker.sasl_file.read_text()}" if broker.sasl_file.exists() else ""
    return f"kafka started on {broker.bootstrap} (pid {proc.pid}{secured}); logs in {broker.log_file}"


def wait_until_up(broker: Broker, subprocess_handle: subprocess.Popen | None,
                  timeout_s: float = START_TIMEOUT_S) -> None:
    exited = f"kafka broker exited with code {{code}} while starting: see {broker.log_file} and {broker.console_file}"
    if broker.process.wait_until_ready(lambda: _broker_answers(broker), timeout_s, subprocess_handle, exited):
        return
    raise UserError(f"kafka broker did not answer on {broker.bootstrap} within {timeout_s:.0f}s: see {broker.log_file}"
                    + _security_hint(broker))


def _security_hint(broker: Broker) -> str:
    client = kafka_security.from_env()
    if broker.sasl_file.exists() != client.sasl:
        return (f" (it {'has' if broker.sasl_file.exists() else 'has no'} SASL listener, the clients use "
                f"{client.describe()}: check the SWITCHYARD_KAFKA_* settings)")
    return ""


def stop(broker: Broker) -> str:
    """Stop the broker this project started, by pid, and wait for it to exit."""
    pid = broker.process.stop(STOP_TIMEOUT_S)
    if pid is None:
        return f"{broker.name} is not running"
    return f"{broker.name} stopped (pid {pid})"


def running_pid(broker: Broker) -> int | None:
    """The pid of the node this project started, if that process still runs."""
    return broker.process.running()


def status(broker: Broker) -> tuple[bool, str]:
    pid = running_pid(broker)
    if pid is None:
        return False, f"{broker.name} is not running"
    if not _broker_answers(broker):
        return False, (f"{broker.name} runs (pid {pid}) but does not answer: see {broker.log_file}"
                       + _security_hint(broker))
    return True, f"{broker.name} is up (pid {pid})"
