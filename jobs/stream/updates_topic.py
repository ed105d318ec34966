"""The updates topic: the compacted topic a handoff's stream sends each changed key's whole state to, and its state
query reads back into `state`. Its name is `<pipeline>.updates.<warehouse>`, the warehouse's identity
(`handoff_log.warehouse_id`) in it: two warehouses running a pipeline of one name on one Kafka cluster never send to
one topic, where compaction would drop one's update of a key for the other's, and a drain would wait for the other's
updates. A handoff keeps the topic its stream first started with (the STREAM_STARTED entry records it).

The input topic is never an updates topic. Every record a stream sends names the handoff that wrote it (the
`switchyard.handoff` header); a stream whose input is such a topic (its own pipeline's, another pipeline's, or
another warehouse's) would read updates as events, and its own updates as more input. Refused in one line when the
stream starts, before it reads any input or sends any update."""

from __future__ import annotations

from switchyard.state_handoff import settings
from switchyard.state_handoff.control import details, handoff_log
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import newest_records
from switchyard.state_handoff.language.pipelines import available
from switchyard.state_handoff.language.spec import Pipeline
from switchyard.state_handoff.stream.update_records import HANDOFF_HEADER
from switchyard.state_handoff.tables import Tables


def updates_topic(pipeline: Pipeline, tables: Tables, handoff_id: str, entries: list) -> str:
    """The topic `handoff_id`'s stream sends its updates to: the one its first start recorded, else the one
    SWITCHYARD_UPDATES_TOPIC names (created ahead, where the stream may not create topics), else this
    warehouse's."""
    for entry in entries:
        if entry.handoff_id == handoff_id and entry.status == Status.STREAM_STARTED:
            return details.of(entry).updates_topic
    return settings.value("SWITCHYARD_UPDATES_TOPIC") or f"{pipeline.name}.updates.{handoff_log.warehouse_id(tables)}"


def last_started_with(tables: Tables) -> str | None:
    """The updates topic of the newest stream start the log records; None before any stream started."""
    return PipelineView.read(tables).updates_topic


def _is_updates_topic_of(topic: str, name: str) -> bool:
    return topic == f"{name}.updates" or topic.startswith(f"{name}.updates.")


def written_by(record) -> str | None:
    """The handoff whose stream wrote `record` (a kafka-python ConsumerRecord); None for any other record."""
    return next((value.decode("utf-8", "replace") for key, value in record.headers or []
                 if key == HANDOFF_HEADER and value is not None), None)


def check_input_topic(bootstrap: str, pipeline: Pipeline, topic: str) -> None:
    """Refuse an input topic that is an updates topic: by its name, or by its newest records."""
    owner = next((name for name in sorted({*available(), pipeline.name}) if _is_updates_topic_of(topic, name)), None)
    if owner is not None:
        raise UserError(f"the input topic {topic} is the updates topic of pipeline {owner}: a stream would read "
                        "updates as events; archive and hand off the topic the events arrive on")
    handoffs = sorted({h for records in newest_records(bootstrap, topic).values() for h in map(written_by, records)
                       if h})
    if handoffs:
        raise UserError(f"the input topic {topic} holds updates a switchyard stream wrote (of handoff {handoffs[0]}), "
                        "not events: archive and hand off the topic the events arrive on")
