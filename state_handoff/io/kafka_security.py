"""Kafka security settings, given once through the environment, as each client takes them: kafka-python keyword
arguments, confluent-kafka's configuration and Spark's `kafka.`-prefixed source/sink options. The only place that
reads SWITCHYARD_KAFKA_*: each through its kind in state_handoff/settings.py, then checked together."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from switchyard.state_handoff import settings
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_protocol import Protocol

PREFIX = "SWITCHYARD_KAFKA_"
PROTOCOL = PREFIX + "SECURITY_PROTOCOL"
MECHANISM = PREFIX + "SASL_MECHANISM"
USERNAME = PREFIX + "SASL_USERNAME"
PASSWORD = PREFIX + "SASL_PASSWORD"
CAFILE = PREFIX + "SSL_CAFILE"
CHECK_HOSTNAME = PREFIX + "SSL_CHECK_HOSTNAME"
PROPERTIES = PREFIX + "PROPERTIES"
KNOWN = (PROTOCOL, MECHANISM, USERNAME, PASSWORD, CAFILE, CHECK_HOSTNAME, PROPERTIES)

SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_LOGIN_MODULE = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}


@dataclass(frozen=True)
class KafkaSecurity(Protocol):
    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    cafile: str | None = None
    check_hostname: bool = True

    def client_kwargs(self) -> dict:
        """kafka-python's KafkaProducer/KafkaConsumer/KafkaAdminClient arguments."""
        kwargs: dict = {"security_protocol": self.protocol}
        if self.sasl:
            kwargs |= {"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                       "sasl_plain_password": self.password}
        if self.ssl:
            kwargs |= {"ssl_check_hostname": self.check_hostname}
            if self.cafile:
                kwargs["ssl_cafile"] = self.cafile
        return kwargs

    def librdkafka_config(self) -> dict[str, str]:
        """confluent-kafka's (librdkafka's) configuration: the Java client's property names, mostly."""
        config = {"security.protocol": self.protocol}
        if self.sasl:
            config |= {"sasl.mechanism": self.mechanism, "sasl.username": self.username,
                       "sasl.password": self.password}
        if self.ssl:
            config["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
            if self.cafile:
                config["ssl.ca.location"] = self.cafile
        return config

    def spark_options(self) -> dict[str, str]:
        """Spark's Kafka source and sink options (the Java client's properties, `kafka.`-prefixed)."""
        options = {"kafka.security.protocol": self.protocol}
        if self.sasl:
            options |= {"kafka.sasl.mechanism": self.mechanism,
                        "kafka.sasl.jaas.config": jaas_config(self.mechanism, self.username, self.password)}
        if self.ssl:
            if self.cafile:
                # The certificates travel inline, so executors on other hosts need no copy of the file.
                options |= {"kafka.ssl.truststore.type": "PEM",
                            "kafka.ssl.truststore.certificates": Path(self.cafile).read_text()}
            if not self.check_hostname:
                options["kafka.ssl.endpoint.identification.algorithm"] = ""
        return options

    def describe(self) -> str:
        if self.sasl:
            return f"{self.protocol}/{self.mechanism} (user {self.username})"
        return self.protocol


def jaas_config(mechanism: str, username: str, password: str) -> str:
    return f'{_LOGIN_MODULE[mechanism]} required username="{username}" password="{password}";'


def from_env(env: Mapping[str, str] | None = None):
    """The settings in the environment, each parsed by its kind and then checked together: an unknown, bad or
    incomplete setting is one UserError."""
    env = settings.environment() if env is None else env
    unknown = sorted(name for name in env if name.startswith(PREFIX) and name not in KNOWN and env[name])
    if unknown:
        raise UserError(f"unknown Kafka setting {unknown[0]} in the environment: the known ones are {', '.join(KNOWN)}")
    value = {name: settings.value(name, env) for name in KNOWN}
    if value[PROPERTIES] is not None:
        return _from_properties(value[PROPERTIES], env)
    protocol = value[PROTOCOL]
    security = KafkaSecurity(protocol=protocol)
    sasl_given = [name for name in (MECHANISM, USERNAME, PASSWORD) if value[name] is not None]
    if security.sasl:
        missing = [name for name in (MECHANISM, USERNAME, PASSWORD) if value[name] is None]
        if missing:
            raise UserError(f"{PROTOCOL}={protocol} needs {', '.join(missing)} in the environment")
        for name in (USERNAME, PASSWORD):
            if any(c in value[name] for c in '"\\'):
                raise UserError(f"{name} must not contain a double quote or a backslash (JAAS quotes it): pick another")
        security = KafkaSecurity(protocol, value[MECHANISM], value[USERNAME], value[PASSWORD])
    elif sasl_given:
        raise UserError(f"{sasl_given[0]} is set but {PROTOCOL} is {protocol}: set it to SASL_PLAINTEXT or SASL_SSL, "
                        "or unset the SASL settings")
    ssl_given = [name for name in (CAFILE, CHECK_HOSTNAME) if settings.given(name, env) is not None]
    if ssl_given and not security.ssl:
        raise UserError(f"{ssl_given[0]} is set but {PROTOCOL} is {protocol}: set it to SSL or SASL_SSL, "
                        "or unset the SSL settings")
    if security.ssl:
        cafile = value[CAFILE]
        if cafile is not None and not cafile.is_file():
            raise UserError(f"{CAFILE}={cafile} is not a readable file: point it at the CA certificates (PEM)")
        security = KafkaSecurity(security.protocol, security.mechanism, security.username, security.password,
                                 None if cafile is None else str(cafile), value[CHECK_HOSTNAME])
    return security


def _from_properties(path, env: Mapping[str, str]):
    """The connection the properties file describes; with it, the other SWITCHYARD_KAFKA_* settings are refused
    (two places that say how to connect would disagree sooner or later)."""
    from switchyard.state_handoff.io.kafka_properties import PropertiesSecurity, read

    also = [name for name in KNOWN if name != PROPERTIES and settings.given(name, env) is not None]
    if also:
        raise UserError(f"{also[0]} is set beside {PROPERTIES}: say how to connect in one of them (in the file: "
                        "security.protocol, sasl.*, ssl.*)")
    security = PropertiesSecurity(str(path), read(path))
    security.check()
    return security


def client_kwargs() -> dict:
    return from_env().client_kwargs()



def librdkafka_config(bootstrap: str) -> dict[str, str]:
    """Everything confluent-kafka needs to reach the cluster: the bootstrap and the security."""
    return {"bootstrap.servers": bootstrap, **from_env().librdkafka_config()}


def spark_options(bootstrap: str) -> dict[str, str]:
    """Everything Spark's Kafka source or sink needs to reach the cluster: the bootstrap and the security."""
    return {"kafka.bootstrap.servers": bootstrap, **from_env().spark_options()}


# A consumer's fetch that finds nothing past its position is held by the broker for up to fetch.max.wait.ms
# (Kafka's default 500 ms). Spark's tasks ask only for offsets that exist, yet a task reading up to a partition's
# end, or a stream's cached consumer whose fetch was sent at the end of the previous batch, sits out the whole wait:
# a micro-batch's stage, or a batch read of the topic's tail, then spends most of its time waiting for nothing.
FETCH_MAX_WAIT_MS = 20


# Input is read committed, by every reader of a topic (the stream, the archive, the backfill's tail, the rebase's
# catch-up, the offsets of cuts and lag): records of a transaction its producer aborted are never aggregated, and
# a topic's end is its last stable offset (an open transaction's records count once it commits). A transaction's
# control markers and aborted records take offsets no consumer sees: "records read" per partition counts the
# records the consumer sees, so it may be less than the span of offsets read.
ISOLATION = "read_committed"


def spark_source_options(bootstrap: str) -> dict[str, str]:
    """`spark_options` for Spark's Kafka source, batch or streaming: committed records only, a short fetch wait."""
    return {**spark_options(bootstrap), "kafka.fetch.max.wait.ms": str(FETCH_MAX_WAIT_MS),
            "kafka.isolation.level": ISOLATION}
