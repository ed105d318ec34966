"""Kafka clients a long-running monitor keeps open between its questions: the latest offsets it measures lag
against, and the consumer group it commits the stream's processed offsets to."""

from __future__ import annotations

from collections.abc import Iterable

from switchyard.state_handoff.io.kafka_io import _ends, _new_consumer


class _KeptConsumer:
    """One client kept open between the questions of a monitor that asks every half second (a client made per
    question connects, probes the broker's API versions and fetches metadata each time), made again after an error.
    `close()` when done. A broker gone away fails a question within REQUEST_TIMEOUT_MS: the client's default of 30 s
    would hold the monitor's loop (its stop signals, its failed queries) that long, where a new client per question
    failed at once."""

    REQUEST_TIMEOUT_MS = 5000

    def __init__(self, bootstrap: str, group: str | None = None):
        self.bootstrap, self.group = bootstrap, group
        self._client = None

    def _ask(self, question):
        if self._client is None:
            self._client = _new_consumer(self.bootstrap, self.REQUEST_TIMEOUT_MS, self.group)
        try:
            return question(self._client)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()


class LatestOffsets(_KeptConsumer):
    """`latest_offsets`, asked again and again through one client."""

    def __call__(self, topics: Iterable[str]) -> dict[str, dict[int, int]]:
        return self._ask(lambda client: _ends(client, self.bootstrap, list(topics)))


class GroupOffsets(_KeptConsumer):
    """The offsets a stream has processed, committed to a consumer group for Kafka's own tools and a team's lag
    dashboards (`kafka-consumer-groups --describe`). For monitoring only: the stream's checkpoint is what it resumes
    from, and it never joins the group (a commit without a generation, as a consumer assigned its partitions
    makes)."""

    def commit(self, topic: str, offsets: dict[int, int]) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        marks = {TopicPartition(topic, p): OffsetAndMetadata(o, "switchyard", -1) for p, o in offsets.items()}
        self._ask(lambda client: client.commit(marks, timeout_ms=self.REQUEST_TIMEOUT_MS))
