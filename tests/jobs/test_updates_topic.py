"""An input topic that is an updates topic is refused in one line when the stream starts: by its name (a
pipeline's `<name>.updates`), or by its records (a stream's updates carry the `switchyard.handoff` header, whatever
the topic is called)."""

from __future__ import annotations

import io
import json
from datetime import datetime

import pytest

from switchyard.jobs.archive import archive_cut, run_archive
from switchyard.jobs.backfill import run_backfill
from switchyard.jobs.inputs.generate import run_generate
from switchyard.jobs.stream import StreamSettings, run_stream
from switchyard.jobs.stream.updates_topic import check_input_topic
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.handoff import run_handoff
from switchyard.state_handoff.io.kafka_security import librdkafka_config
from switchyard.state_handoff.pipelines import get_pipeline
from switchyard.state_handoff.tables import Tables

PIPELINE = get_pipeline("demo")


def _quiet(*_):
    pass


def test_a_pipelines_updates_topic_is_refused_as_input_by_name(bootstrap):
    for topic, owner in (("demo.updates", "demo"), ("kinds.updates", "kinds")):
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
                   StreamSettings(until_caught_up=True, caught_up_lag=0, tables_trigger_seconds=1), out=_quiet)
