"""Each warehouse's streams send to an updates topic of their own. An input topic that is an updates topic is
refused in one line when the stream starts: by its name (a pipeline's `<name>.updates...`), or by its records (a
stream's updates carry the `switchyard.handoff` header, whatever the topic is called)."""

from __future__ import annotations

import io
import json
import re
from datetime import datetime

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.handoff import run_handoff
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import StreamOptions, run_stream
from switchyard.jobs.stream.updates_topic import check_input_topic, written_by
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_security import librdkafka_config
from switchyard.state_handoff.language.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables
from tests.support import oracle
from tests.support.compare import assert_state_matches
from tests.support.streams import batch_ends

PIPELINE = get_pipeline("demo")


def _quiet(*_):
    pass


def test_a_pipelines_updates_topic_is_refused_as_input_by_name(bootstrap):
    for topic, owner in (("demo.updates", "demo"), ("kinds.updates", "kinds"), ("demo.updates.0123456789ab", "demo")):
        with pytest.raises(UserError, match=rf"^the input topic {topic} is the updates topic of pipeline {owner}: "):
            check_input_topic(bootstrap, PIPELINE, topic)


def test_a_stream_over_a_topic_of_updates_is_refused_before_it_streams(spark, bootstrap, topic_name, tmp_path):
    """Events, then what a stream of another warehouse sends (the whole state of a key, with its handoff's header),
    in one topic under a name of no pipeline: archived, backfilled and handed off, its stream refuses to start."""
    from confluent_kafka import Producer

    run_generate(bootstrap, topic_name, events=40, keys=4, partitions=1, days=1, seed=5,
                 malformed_rate=0.0, out=io.StringIO())
    producer = Producer(librdkafka_config(bootstrap))
    for i in range(12):
        state = {"key": f"k{i % 3}", "event_count": i, "last_event_time": datetime(2026, 1, 1).isoformat()}
        producer.produce(topic_name, json.dumps(state).encode(), f"k{i % 3}".encode(), 0,
                         headers=[("switchyard.handoff", b"0123456789ab")])
    assert producer.flush(30) == 0
    tables = Tables(str(tmp_path / "wh"), PIPELINE.name)
    run_archive(spark, PIPELINE, tables, bootstrap, topic_name, archive_cut(bootstrap, topic_name, fraction=0.5),
                out=_quiet)
    run_backfill(spark, PIPELINE, tables, out=_quiet)
    run_handoff(spark, PIPELINE, tables, bootstrap)
    with pytest.raises(UserError, match=rf"^the input topic {topic_name} holds updates a switchyard stream wrote "
                                        r"\(of handoff 0123456789ab\), not events"):
        run_stream(spark, PIPELINE, tables, bootstrap,
                   StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=_quiet)


def test_two_warehouses_of_one_pipeline_on_one_cluster_send_to_topics_of_their_own(spark, bootstrap, topic_name,
                                                                                    tmp_path):
    """Two warehouses running pipeline `demo` over one input topic on one cluster, each switched and streamed until
    caught up: each stream sends to an updates topic of its own, holding only its own handoff's updates (on one
    topic, compaction could drop one warehouse's update of a key for the other's, and a stop would wait on the
    other's updates), and each `state` equals the oracle's."""
    from kafka import KafkaConsumer

    run_generate(bootstrap, topic_name, events=240, keys=6, partitions=2, days=2, seed=8, malformed_rate=0.0,
                 out=io.StringIO())
    topics = {}
    for name in ("east", "west"):
        tables = Tables(str(tmp_path / name), PIPELINE.name)
        run_archive(spark, PIPELINE, tables, bootstrap, topic_name,
                    archive_cut(bootstrap, topic_name, fraction=0.5), out=_quiet)
        run_backfill(spark, PIPELINE, tables, out=_quiet)
        run_handoff(spark, PIPELINE, tables, bootstrap)
        run_stream(spark, PIPELINE, tables, bootstrap,
                   StreamOptions(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=_quiet)
        started = handoff_log.latest(tables, Status.STREAM_STARTED)
        topics[started.handoff_id] = details.of(started).updates_topic
        handoff = handoff_log.latest(tables, Status.HANDOFF_COMMITTED)
        start, records = handoff_log.offsets(handoff), oracle.read_topic(bootstrap, topic_name)
        expected = oracle.through_stream([r for r in records if r.offset < start.get(r.partition, 0)],
                                         [r for r in records if r.offset >= start.get(r.partition, 0)],
                                         batch_ends(tables, handoff.handoff_id))
        assert_state_matches(spark, tables, expected)

    assert len(set(topics.values())) == 2, f"both warehouses' streams sent to {set(topics.values())}"
    for handoff_id, topic in topics.items():
        consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                 consumer_timeout_ms=5000)
        writers = {written_by(record) for record in consumer}
        consumer.close()
        assert writers == {handoff_id}, f"{topic} holds updates of {writers}"


def test_an_updates_topic_named_as_the_input_is_refused_before_the_stream_sends(spark, bootstrap, topic_name,
                                                                                 tmp_path, monkeypatch):
    """SWITCHYARD_UPDATES_TOPIC naming the input topic itself: the stream would read its own updates as events.
    Refused in one line when it starts, before it sends any update."""
    from switchyard.state_handoff.io.kafka_io import offset_bounds
    from tests.jobs.test_rebase_failures import _prepare
    from tests.support.streams import stream_until_caught_up

    tables = _prepare(spark, bootstrap, topic_name, tmp_path / "wh", fraction=1.0)
    ends = offset_bounds(bootstrap, topic_name)
    monkeypatch.setenv("SWITCHYARD_UPDATES_TOPIC", topic_name)
    with pytest.raises(UserError, match=rf"^the updates topic is {re.escape(topic_name)}, the pipeline's input topic"):
        stream_until_caught_up(spark, tables, bootstrap)
    assert offset_bounds(bootstrap, topic_name) == ends, "nothing sent to the input"
