"""A Kafka client properties file, in the Java client's format, is how every client connects: Spark takes each
property as given, the Python clients the same connection under their names; what they cannot take is refused in one
line, and no secret is shown. (A broker with ACLs reached this way: tests/jobs/test_kafka_acls.py.)"""

from __future__ import annotations

import pytest

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_security

SCRAM = """\
# comments and blank lines are skipped

security.protocol = SASL_SSL
sasl.mechanism: SCRAM-SHA-256
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="team-app" password="s3cret pass";
ssl.truststore.type=PEM
ssl.truststore.location=/etc/kafka/ca.pem
ssl.keystore.type=PEM
ssl.keystore.location=/etc/kafka/client.pem
ssl.endpoint.identification.algorithm=
client.id=team-app
fetch.max.bytes=1048576
group.id=not-for-spark
"""


def _security(tmp_path, text: str, **more: str):
    path = tmp_path / "client.properties"
    path.write_text(text)
    return kafka_security.from_env({"SWITCHYARD_KAFKA_PROPERTIES": str(path), **more})


def test_each_client_takes_the_files_connection(tmp_path):
    security = _security(tmp_path, SCRAM)
    spark = security.spark_options()
    assert spark["kafka.sasl.jaas.config"].endswith('username="team-app" password="s3cret pass";')
    assert spark["kafka.fetch.max.bytes"] == "1048576" and spark["kafka.client.id"] == "team-app"
    assert "kafka.group.id" not in spark, "what Spark's source sets itself is not passed"
    assert security.librdkafka_config() == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "client.id": "team-app",
        "ssl.endpoint.identification.algorithm": "", "sasl.username": "team-app", "sasl.password": "s3cret pass",
        "ssl.ca.location": "/etc/kafka/ca.pem", "ssl.certificate.location": "/etc/kafka/client.pem",
        "ssl.key.location": "/etc/kafka/client.pem"}
    assert security.client_kwargs() == {
        "security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-256", "sasl_plain_username": "team-app",
        "sasl_plain_password": "s3cret pass", "ssl_check_hostname": False, "ssl_cafile": "/etc/kafka/ca.pem",
        "ssl_certfile": "/etc/kafka/client.pem", "ssl_keyfile": "/etc/kafka/client.pem"}
    shown = f"{security!r} {security.describe()}"
    assert "s3cret" not in shown and "team-app" in shown


@pytest.mark.parametrize("text, more, refusal", [
    (SCRAM, {"SWITCHYARD_KAFKA_SASL_USERNAME": "other"},
     r"^SWITCHYARD_KAFKA_SASL_USERNAME is set beside SWITCHYARD_KAFKA_PROPERTIES"),
    ("security.protocol=SSL\nssl.truststore.location=/x.jks\nssl.truststore.type=JKS\n", {},
     r"the truststore is not PEM: set ssl.truststore.type=PEM"),
    ("security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.certificates=-----BEGIN\n", {},
     r"ssl.truststore.certificates gives PEM inline; give it as a file"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n", {},
     r"sasl.mechanism=GSSAPI is passed to Spark, but switchyard's Python clients take PLAIN, SCRAM and OAUTHBEARER"),
    ("security.protocol=SASL_SSL\nsasl.mechanism=OAUTHBEARER\n", {},
     r"sasl.mechanism=OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url, clientId=\"...\" in sasl.jaas.config, "
     r"clientSecret=\"...\" in sasl.jaas.config \(an OpenID Connect client-credentials login"),
    ("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n", {}, r'sasl.jaas.config needs username="..."'),
    ("security.protocol\n", {}, r"the line 'security.protocol' is not key=value"),
])
def test_what_the_python_clients_cannot_take_is_refused_in_one_line(tmp_path, text, more, refusal):
    with pytest.raises(UserError, match=refusal) as refused:
        _security(tmp_path, text, **more)
    assert "\n" not in str(refused.value)


def test_a_missing_file_is_refused_naming_it(tmp_path):
    with pytest.raises(UserError, match=r"SWITCHYARD_KAFKA_PROPERTIES=.*nope.properties is not a readable file"):
        kafka_security.from_env({"SWITCHYARD_KAFKA_PROPERTIES": str(tmp_path / "nope.properties")})
