"""The updates topic on a team's cluster: a topic the team created beforehand keeps every setting it gave it when a
stream starts on it (the stream's start calls `create_topic(..., exist_ok=True, compacted=True)`), and gets only
the settings it lacks."""

from __future__ import annotations

from kafka import KafkaAdminClient
from kafka.admin import NewTopic

from switchyard.state_handoff.io.kafka_io import create_topic, topic_config
from switchyard.state_handoff.io.kafka_security import client_kwargs


def _pre_create(bootstrap: str, topic: str, configs: dict[str, str]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap, **client_kwargs())
    try:
        admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1, topic_configs=configs)])
    finally:
        admin.close()


def test_a_pre_created_updates_topic_keeps_the_settings_its_team_gave_it(bootstrap, topic_name):
    _pre_create(bootstrap, topic_name, {"retention.ms": "123456789", "max.message.bytes": "2000000"})
    assert create_topic(bootstrap, topic_name, partitions=2, exist_ok=True, compacted=True) is False
    config = topic_config(bootstrap, topic_name)
    assert config["cleanup.policy"] == "compact", "the compaction it lacked is set"
    assert (config["retention.ms"], config["max.message.bytes"]) == ("123456789", "2000000"), "the team's stay"


def test_a_cleanup_policy_the_team_set_stays_as_set(bootstrap, topic_name):
    _pre_create(bootstrap, topic_name, {"cleanup.policy": "compact,delete", "retention.ms": "604800000"})
    create_topic(bootstrap, topic_name, partitions=2, exist_ok=True, compacted=True)
    config = topic_config(bootstrap, topic_name)
    assert (config["cleanup.policy"], config["retention.ms"]) == ("compact,delete", "604800000")
