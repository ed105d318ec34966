"""A stream on a cluster whose authorizer is on, as a team's platform runs Kafka: the application's user is granted
Read on the input topic and on its consumer group, and Read and Write on an updates topic created ahead (the stream
reads its updates back into `state`); nothing on the cluster, no topic creation, no configuration rights. It
connects with SCRAM given as a Kafka client properties file (SWITCHYARD_KAFKA_PROPERTIES). Archive, backfill,
handoff and a stream to caught up all run, and the tables equal the oracle's."""

from __future__ import annotations

import os
from contextlib import contextmanager
from datetime import datetime

import pytest

from switchyard.deploy import kafka_broker
from switchyard.deploy.local_server import free_ports
from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.state_handoff.io import kafka_security
from switchyard.state_handoff.io.kafka_io import create_topic, offset_bounds, produce
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support.kafka_cluster import SASL_ENV, kafka_environment
from tests.support.streams import assert_matches_oracle, stream_until_caught_up, tail_events

PIPELINE = get_pipeline("demo")
APP_USER, APP_PASSWORD = "switchyard-app", "app-only.s3cret"
APP_PROPERTIES = f"""\
# the application's Kafka client configuration, as the platform team hands it out
security.protocol=SASL_PLAINTEXT
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\
    username="{APP_USER}" password="{APP_PASSWORD}";
client.id=switchyard-app
"""


@contextmanager
def as_platform_team():
    """The broker's own (super) user, for what the platform team does: topics, users, rights, other producers."""
    given = os.environ.pop("SWITCHYARD_KAFKA_PROPERTIES", None)
    try:
        with kafka_environment(SASL_ENV):
            yield
    finally:
        if given is not None:
            os.environ["SWITCHYARD_KAFKA_PROPERTIES"] = given


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    """A broker with SCRAM and Kafka's StandardAuthorizer: its own user is the one super user."""
    broker = kafka_broker.Broker.at(free_ports(2), tmp_path_factory.mktemp("kafka-acls"))
    with kafka_environment(SASL_ENV):
        kafka_broker.start(broker, sasl=True, acls=True)
    yield broker
    kafka_broker.stop(broker)


def _grant(bootstrap: str, user: str, password: str, rights: list[tuple[str, str, str]]) -> None:
    """As the super user: `user` gets a SCRAM credential and only `rights` (resource type, name, operation)."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient, ResourcePatternType,
                                       ResourceType, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion)

    admin = AdminClient(kafka_security.librdkafka_config(bootstrap))
    credential = UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096),
                                              password.encode())
    for future in admin.alter_user_scram_credentials([credential]).values():
        future.result(30)
    bindings = [AclBinding(getattr(ResourceType, kind), name, ResourcePatternType.LITERAL, f"User:{user}", "*",
                           getattr(AclOperation, operation), AclPermissionType.ALLOW)
                for kind, name, operation in rights]
    for future in admin.create_acls(bindings).values():
        future.result(30)


def _committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **kafka_security.client_kwargs())
    try:
        return {tp.partition: mark.offset for tp, mark in admin.list_consumer_group_offsets(group).items()
                if tp.topic == topic}
    finally:
        admin.close()


def test_a_stream_granted_only_read_and_write_on_its_topics_runs_to_caught_up(spark, acl_broker, tmp_path,
                                                                              monkeypatch):
    bootstrap, topic, updates = acl_broker.bootstrap, "acl.events", "acl.demo.updates"
    group = f"switchyard.{PIPELINE.name}"
    with as_platform_team():  # the topics, the application's user and its rights, the input's records
        run_generate(bootstrap, topic, events=400, keys=12, partitions=2, days=2, seed=81, malformed_rate=0.03,
                     out=open(os.devnull, "w"))
        create_topic(bootstrap, updates, partitions=2, compacted=True)
        _grant(bootstrap, APP_USER, APP_PASSWORD, [("TOPIC", topic, "READ"), ("GROUP", group, "READ"),
                                                   ("TOPIC", updates, "READ"), ("TOPIC", updates, "WRITE")])

    properties = tmp_path / "client.properties"
    properties.write_text(APP_PROPERTIES)
    monkeypatch.setenv("SWITCHYARD_KAFKA_PROPERTIES", str(properties))  # the application from here on
    monkeypatch.setenv("SWITCHYARD_UPDATES_TOPIC", updates)
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic, archive_cut(bootstrap, topic, fraction=0.5),
                out=lambda *_: None)
    run_backfill(spark, PIPELINE, tables, out=lambda *_: None)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    with as_platform_team():
        produce(bootstrap, topic, tail_events(2, datetime(2026, 1, 2, 20), 40, seed=82))
    result = stream_until_caught_up(spark, tables, bootstrap)
    assert result.reason == "caught up", result

    assert_matches_oracle(spark, bootstrap, topic, tables)
    with as_platform_team():
        ends = {p: hi for p, (_, hi) in offset_bounds(bootstrap, topic).items()}
        assert _committed(bootstrap, group, topic) == ends, "the group shows the stream caught up"
