"""Kafka client properties given as a file (SWITCHYARD_KAFKA_PROPERTIES), in the Java client's own format: what
`kafka-console-consumer --consumer.config` takes, so a platform team's existing client configuration works as it is.

Spark's Kafka source and sink are the Java client: they take every property, `kafka.`-prefixed. The Python clients
(kafka-python, confluent-kafka) take the same connection under other names; the properties that say how to connect
are mapped once here, and one they cannot take is refused in one line naming it. Secrets (passwords, the JAAS line,
inline keys) are never shown: `describe` names the protocol, mechanism and user only."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_oauth
from switchyard.state_handoff.io.kafka_protocol import Protocol

# Spark's Kafka source and sink set these themselves (and refuse them as options), or switchyard does
NOT_PASSED = {"bootstrap.servers", "group.id", "key.deserializer", "value.deserializer", "key.serializer",
              "value.serializer", "auto.offset.reset", "enable.auto.commit", "interceptor.classes"}
# the same name and meaning in librdkafka's configuration
SAME_IN_LIBRDKAFKA = {"security.protocol", "sasl.mechanism", "ssl.endpoint.identification.algorithm", "client.id",
                      "ssl.key.password", "sasl.kerberos.service.name", "ssl.cipher.suites"}
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def read(path: Path) -> dict[str, str]:
    """A Java `.properties` file: `key=value`, `key: value` or `key value` lines, `#` and `!` comments, a line
    ending in a backslash continued on the next."""
    if not path.is_file():
        raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={path} is not a readable file: point it at the Kafka client "
                        "properties (the file kafka-console-consumer's --consumer.config takes)")
    properties, pending = {}, ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        pending = ""
        if not line or line[0] in "#!":
            continue
        match = re.match(r"([^=:\s]+)\s*[=:\s]\s*(.*)$", line)
        if match is None:
            raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={path}: the line {raw.strip()!r} is not key=value")
        properties[match[1]] = match[2]
    return properties


def jaas_options(jaas: str) -> dict[str, str]:
    """The quoted options of a JAAS line: `... required username="u" password="p";` -> {username, password}."""
    return {name: value.replace('\\"', '"') for name, value in _JAAS_OPTION.findall(jaas)}


@dataclass(frozen=True)
class PropertiesSecurity(Protocol):
    """The connection a properties file describes, as each client takes it (KafkaSecurity's interface)."""

    path: str
    properties: dict[str, str] = field(default_factory=dict, repr=False)  # secrets among them

    @property
    def protocol(self) -> str:
        return self.properties.get("security.protocol", "PLAINTEXT").upper()

    @property
    def mechanism(self) -> str | None:
        return self.properties.get("sasl.mechanism", "GSSAPI") if self.sasl else None

    @property
    def username(self) -> str | None:
        return jaas_options(self.properties.get("sasl.jaas.config", "")).get("username")

    @property
    def oauth(self) -> kafka_oauth.ClientCredentials | None:
        """The OpenID Connect client credentials of an OAUTHBEARER login."""
        if self.mechanism != "OAUTHBEARER":
            return None
        return kafka_oauth.from_properties(self.properties, jaas_options(self.properties.get("sasl.jaas.config", "")),
                                           self.path)

    @property
    def password(self) -> str | None:
        return jaas_options(self.properties.get("sasl.jaas.config", "")).get("password")

    def _pem(self, kind: str) -> bool:
        """Whether the trust or key store is PEM, the one format the Python clients read."""
        store = self.properties.get(f"ssl.{kind}.type")
        given = [k for k in self.properties if k.startswith(f"ssl.{kind}.")]
        return not given or (store or "").upper() == "PEM"

    def check(self) -> None:
        """Refuse, in one line, what the Python clients cannot take."""
        if self.sasl and self.mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
            raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={self.path}: sasl.mechanism={self.mechanism} is passed "
                            "to Spark, but switchyard's Python clients take PLAIN, SCRAM and OAUTHBEARER (OpenID "
                            "Connect client credentials) only")
        if self.oauth is not None:
            pass  # its credentials were checked in reading them
        elif self.sasl and (self.username is None or self.password is None):
            raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={self.path}: sasl.jaas.config needs username=\"...\" and "
                            "password=\"...\"")
        inline = [k for k in ("ssl.truststore.certificates", "ssl.keystore.certificate.chain", "ssl.keystore.key")
                  if k in self.properties]
        if inline:
            raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={self.path}: {inline[0]} gives PEM inline; give it as a "
                            "file instead (ssl.truststore.location, ssl.keystore.location with type PEM): switchyard's "
                            "Python clients read certificates from files")
        for kind in ("truststore", "keystore"):
            if self.ssl and not self._pem(kind):
                raise UserError(f"SWITCHYARD_KAFKA_PROPERTIES={self.path}: the {kind} is not PEM: set "
                                f"ssl.{kind}.type=PEM with a PEM file (the Python clients read no JKS or PKCS12)")

    def spark_options(self) -> dict[str, str]:
        return {f"kafka.{k}": v for k, v in self.properties.items() if k not in NOT_PASSED}

    def librdkafka_config(self) -> dict[str, str]:
        p = self.properties
        config = {k: v for k, v in p.items() if k in SAME_IN_LIBRDKAFKA}
        config["security.protocol"] = self.protocol
        if self.oauth is not None:
            config |= self.oauth.librdkafka_config()
        elif self.sasl:
            config |= {"sasl.username": self.username, "sasl.password": self.password}
        if self.ssl:
            if "ssl.truststore.location" in p:
                config["ssl.ca.location"] = p["ssl.truststore.location"]
            if "ssl.keystore.location" in p:  # a PEM file holding the key and its certificate
                config |= {"ssl.certificate.location": p["ssl.keystore.location"],
                           "ssl.key.location": p["ssl.keystore.location"]}
        return config

    def client_kwargs(self) -> dict:
        p = self.properties
        kwargs: dict = {"security_protocol": self.protocol}
        if self.oauth is not None:
            kwargs |= {"sasl_mechanism": "OAUTHBEARER",
                       "sasl_oauth_token_provider": kafka_oauth.token_provider(self.oauth)}
        elif self.sasl:
            kwargs |= {"sasl_mechanism": self.mechanism, "sasl_plain_username": self.username,
                       "sasl_plain_password": self.password}
        if self.ssl:
            kwargs["ssl_check_hostname"] = p.get("ssl.endpoint.identification.algorithm", "https") != ""
            if "ssl.truststore.location" in p:
                kwargs["ssl_cafile"] = p["ssl.truststore.location"]
            if "ssl.keystore.location" in p:
                kwargs |= {"ssl_certfile": p["ssl.keystore.location"], "ssl_keyfile": p["ssl.keystore.location"]}
            if "ssl.key.password" in p:
                kwargs["ssl_password"] = p["ssl.key.password"]
        return kwargs

    def describe(self) -> str:
        user = self.oauth.client_id if self.oauth is not None else self.username
        who = f"{self.protocol}/{self.mechanism} (user {user})" if self.sasl else self.protocol
        return f"{who}, from {self.path}"
