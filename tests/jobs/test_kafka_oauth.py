"""A cluster whose clients log in with OAUTHBEARER tokens of an OpenID Connect provider (Confluent Cloud, Event
Hubs and MSK's OIDC logins work this way): the application's Kafka client properties file names the provider's token
endpoint and the client's id and secret, as the Java client takes them. Spark's Kafka source and sink use it as
given; switchyard's Python clients (kafka-python, confluent-kafka) log in with the same credentials. Archive,
backfill, handoff and a stream to caught up run, the provider saw each kind of client ask for tokens, and the tables
equal the oracle's."""

from __future__ import annotations

import os

import pytest

from switchyard.deploy import kafka_broker
from switchyard.deploy.local_server import free_ports
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_security
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.kafka_cluster import SASL_ENV, kafka_environment
from tests.support.oidc import AUDIENCE, IdentityProvider
from tests.support.streams import switch_half_archived

PIPELINE = get_pipeline("demo")
CLIENT, SECRET = "switchyard-app", "oidc-only.s3cret"


def _properties(token_url: str, secret: str = SECRET) -> str:
    return f"""\
# the application's Kafka client configuration, as the platform team hands it out
security.protocol=SASL_PLAINTEXT
sasl.mechanism=OAUTHBEARER
sasl.login.callback.handler.class=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler
sasl.oauthbearer.token.endpoint.url={token_url}
sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\
    clientId="{CLIENT}" clientSecret="{secret}" scope="kafka";
"""


@pytest.fixture(scope="module")
def oidc_broker(tmp_path_factory):
    """A broker whose SASL listener takes the provider's tokens (OAUTHBEARER) beside SCRAM for its own user."""
    with IdentityProvider({CLIENT: SECRET}) as provider:
        broker = kafka_broker.Broker.at(free_ports(2), tmp_path_factory.mktemp("kafka-oidc"))
        with kafka_environment(SASL_ENV):
            kafka_broker.start(broker, sasl=True, oidc=kafka_broker.Oidc(provider.jwks_url, AUDIENCE))
        try:
            yield broker, provider
        finally:
            kafka_broker.stop(broker)


def test_a_stream_whose_clients_log_in_with_oidc_tokens_runs_to_caught_up(spark, oidc_broker, tmp_path,
                                                                         monkeypatch):
    broker, provider = oidc_broker
    bootstrap, topic = broker.bootstrap, "oidc.events"
    with kafka_environment(SASL_ENV):  # the platform team's producer
        run_generate(bootstrap, topic, events=400, keys=12, partitions=2, days=2, seed=91, malformed_rate=0.03,
                     out=open(os.devnull, "w"))
    for name in SASL_ENV:
        monkeypatch.delenv(name, raising=False)

    wrong = tmp_path / "wrong.properties"
    wrong.write_text(_properties(provider.token_url, secret="not-the-secret"))
    monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(wrong))
    with pytest.raises(UserError, match=f"the token endpoint {provider.token_url} refused client {CLIENT}: HTTP 401"):
        kafka_security.client_kwargs()["sasl_oauth_token_provider"].token()

    properties = tmp_path / "client.properties"
    properties.write_text(_properties(provider.token_url))
    monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(properties))  # the application from here on
    assert kafka_security.from_env().describe() == f"SASL_PLAINTEXT/OAUTHBEARER (user {CLIENT}), from {properties}"
    switch_half_archived(spark, PIPELINE, Tables(str(tmp_path / "wh"), PIPELINE.name), bootstrap, topic, 92)

    asked = {agent.split("/")[0] for (client, agent), n in provider.issued.items() if client == CLIENT and n}
    assert {"Java", "switchyard kafka-python"} <= asked, provider.issued
