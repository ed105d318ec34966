"""SWITCHYARD_KAFKA_* settings as each client takes them, and the one-line refusal of unknown or partial settings
(the settings against a real SASL cluster: tests/deploy/test_kafka_cluster.py)."""

from __future__ import annotations

import pytest

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_security import from_env

SCRAM = {"SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "SWITCHYARD_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
         "SWITCHYARD_KAFKA_SASL_USERNAME": "alice", "SWITCHYARD_KAFKA_SASL_PASSWORD": "pw;with=signs"}


def test_nothing_set_is_plaintext():
    security = from_env({"PATH": "/bin", "SWITCHYARD_BOOTSTRAP": "h:1"})
    assert security.client_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert security.spark_options() == {"kafka.security.protocol": "PLAINTEXT"}


def test_scram_for_kafka_python_and_for_spark():
    security = from_env(SCRAM)
    assert security.client_kwargs() == {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "SCRAM-SHA-512",
                                        "sasl_plain_username": "alice", "sasl_plain_password": "pw;with=signs"}
    assert security.spark_options() == {
        "kafka.security.protocol": "SASL_PLAINTEXT", "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": 'org.apache.kafka.common.security.scram.ScramLoginModule required '
                                  'username="alice" password="pw;with=signs";'}


def test_ssl_certificates_travel_inline_to_spark(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    security = from_env({**SCRAM, "SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "sasl_ssl",
                         "SWITCHYARD_KAFKA_SSL_CAFILE": str(ca), "SWITCHYARD_KAFKA_SSL_CHECK_HOSTNAME": "false"})
    assert security.client_kwargs()["ssl_cafile"] == str(ca)
    assert security.client_kwargs()["ssl_check_hostname"] is False
    options = security.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.ssl.truststore.type"] == "PEM"
    assert options["kafka.ssl.truststore.certificates"] == ca.read_text()
    assert options["kafka.ssl.endpoint.identification.algorithm"] == ""


@pytest.mark.parametrize("env, needles", [
    ({"SWITCHYARD_KAFKA_SASL_USER": "alice"}, ["unknown Kafka setting SWITCHYARD_KAFKA_SASL_USER"]),
    ({"SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "KERBEROS"}, ["KERBEROS", "SASL_PLAINTEXT"]),
    ({k: v for k, v in SCRAM.items() if not k.endswith("PASSWORD")}, ["needs SWITCHYARD_KAFKA_SASL_PASSWORD"]),
    ({**SCRAM, "SWITCHYARD_KAFKA_SASL_MECHANISM": "GSSAPI"}, ["GSSAPI", "SCRAM-SHA-512"]),
    ({"SWITCHYARD_KAFKA_SASL_USERNAME": "alice"}, ["SWITCHYARD_KAFKA_SASL_USERNAME is set", "PLAINTEXT"]),
    ({**SCRAM, "SWITCHYARD_KAFKA_SASL_PASSWORD": 'a"b'}, ["SWITCHYARD_KAFKA_SASL_PASSWORD", "double quote"]),
    ({"SWITCHYARD_KAFKA_SSL_CAFILE": "/ca.pem"}, ["SWITCHYARD_KAFKA_SSL_CAFILE is set", "SSL"]),
    ({"SWITCHYARD_KAFKA_SECURITY_PROTOCOL": "SSL", "SWITCHYARD_KAFKA_SSL_CAFILE": "/no/such.pem"},
     ["/no/such.pem", "not a readable file"]),
])
def test_unknown_or_partial_settings_are_one_line(env, needles):
    with pytest.raises(UserError) as refused:
        from_env(env)
    message = str(refused.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
