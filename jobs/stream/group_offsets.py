"""The input offsets a stream has processed, committed to a Kafka consumer group so that Kafka's own tools
(`kafka-consumer-groups --describe`) and a team's lag dashboards see the stream. For monitoring only: the stream
resumes from its checkpoint, never from the group."""

from __future__ import annotations

from switchyard.jobs.log import warnings_to
from switchyard.state_handoff import settings
from switchyard.state_handoff.io.kafka_watch import GroupOffsets

OFF = "off"


def group_name(pipeline: str) -> str | None:
    """SWITCHYARD_CONSUMER_GROUP, else `switchyard.<pipeline>`; None when it is `off`."""
    given = settings.value("SWITCHYARD_CONSUMER_GROUP")
    if given is None:
        return f"switchyard.{pipeline}"
    return None if given.strip().lower() == OFF else given


class ProcessedOffsets:
    """Commits the positions the monitor measured, when they moved and at most every `every_s` (and once more as
    the stream's queries end). A commit that fails is said once and tried again after `retry_s` (a broker away
    would otherwise hold the monitor's loop for a client's timeout every few seconds); the stream goes on."""

    def __init__(self, bootstrap: str, pipeline: str, topic: str, out, every_s: float = 5.0, retry_s: float = 30.0):
        self.group, self.topic, self.out, self.every_s = group_name(pipeline), topic, out, every_s
        self.client = GroupOffsets(bootstrap, self.group) if self.group else None
        self.committed: dict[int, int] = {}
        self.pending: dict[int, int] = {}
        self.last_at = float("-inf")
        self.retry_s = retry_s
        self.failing = False

    def offer(self, positions: dict[int, int], now: float) -> None:
        self.pending = dict(positions)
        if now - self.last_at >= (self.retry_s if self.failing else self.every_s):
            self.flush(now)

    def flush(self, now: float) -> None:
        if self.client is None or not self.pending or self.pending == self.committed:
            return
        self.last_at = now
        try:
            self.client.commit(self.topic, self.pending)
        except Exception as err:  # noqa: BLE001 - monitoring only: no broker error stops the stream
            if not self.failing:
                warnings_to(self.out)(f"consumer group {self.group}: offsets not committed ({type(err).__name__}: "
                                      f"{err}); Kafka's tools will not show this stream's lag until a commit succeeds")
            self.failing = True
            return
        if self.failing:
            self.out(f"consumer group {self.group}: offsets committed again")
        self.failing = False
        self.committed = dict(self.pending)

    def close(self, now: float) -> None:
        if not self.failing:
            self.flush(now)
        if self.client is not None:
            self.client.close()
