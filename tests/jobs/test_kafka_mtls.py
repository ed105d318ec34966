"""A pipeline over mutual TLS, configured as a team configures its Kafka clients: a properties file naming PEM
files (SWITCHYARD_KAFKA_PROPERTIES). The broker asks every client for a certificate made for the test; archive,
backfill, handoff and a stream to caught up run through it, and the tables equal the oracle's."""

from __future__ import annotations

import os
import time

from switchyard.deploy import kafka_broker
from switchyard.deploy.local_server import free_ports
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.streams import switch_half_archived
from tests.support.tls import make_certificates

PIPELINE = get_pipeline("demo")


def test_a_pipeline_over_mutual_tls_from_client_properties_matches_the_oracle(spark, tmp_path, monkeypatch):
    certs = make_certificates(tmp_path / "certs")
    trust = f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={certs.ca}\n"
    (tmp_path / "no-certificate.properties").write_text(trust)
    (tmp_path / "client.properties").write_text(
        trust + f"ssl.keystore.type=PEM\nssl.keystore.location={certs.client}\n")
    monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(tmp_path / "client.properties"))
    broker = kafka_broker.Broker.at(free_ports(2), tmp_path / "kafka")
    kafka_broker.start(broker, tls=kafka_broker.Tls(keystore=certs.broker, truststore=certs.ca))
    try:
        bootstrap, topic = broker.bootstrap, "mtls.events"
        monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(tmp_path / "no-certificate.properties"))
        assert not kafka_broker.answers(bootstrap), "a client without a certificate is turned away"
        monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(tmp_path / "client.properties"))
        deadline = time.monotonic() + 30
        while not kafka_broker.answers(bootstrap):  # the turned-away client's connection is closed first
            assert time.monotonic() < deadline, "the broker does not answer a client with a certificate"
            time.sleep(0.5)

        run_generate(bootstrap, topic, events=400, keys=12, partitions=2, days=2, seed=91, malformed_rate=0.03,
                     out=open(os.devnull, "w"))
        switch_half_archived(spark, PIPELINE, Tables(str(tmp_path / "wh"), PIPELINE.name), bootstrap, topic, 92)
    finally:
        kafka_broker.stop(broker)
