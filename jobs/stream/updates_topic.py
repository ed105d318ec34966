"""The input topic is never an updates topic. Every record a stream sends to `<pipeline>.updates` names the handoff
that wrote it (the `switchyard.handoff` header); a stream whose input is such a topic (its own pipeline's, another
pipeline's, or another warehouse's) would read updates as events, and its own updates as more input. Refused in one
line when the stream starts, before it reads any input or sends any update."""

from __future__ import annotations

from switchyard.jobs.stream.keyed import HANDOFF_HEADER
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import newest_records
from switchyard.state_handoff.pipelines import available
from switchyard.state_handoff.spec import Pipeline


def written_by(record) -> str | None:
    """The handoff whose stream wrote `record` (a kafka-python ConsumerRecord); None for any other record."""
    return next((value.decode("utf-8", "replace") for key, value in record.headers or []
                 if key == HANDOFF_HEADER and value is not None), None)


def check_input_topic(bootstrap: str, pipeline: Pipeline, topic: str) -> None:
    """Refuse an input topic that is an updates topic: by its name, or by its newest records."""
    owner = next((name for name in sorted({*available(), pipeline.name}) if topic == f"{name}.updates"), None)
    if owner is not None:
        raise UserError(f"the input topic {topic} is the updates topic of pipeline {owner}: a stream would read "
                        "updates as events; archive and hand off the topic the events arrive on")
    handoffs = sorted({h for records in newest_records(bootstrap, topic).values() for h in map(written_by, records)
                       if h})
    if handoffs:
        raise UserError(f"the input topic {topic} holds updates a switchyard stream wrote (of handoff {handoffs[0]}), "
                        "not events: archive and hand off the topic the events arrive on")
