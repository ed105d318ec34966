"""Kafka topics and offsets as the switch needs them: create, produce, earliest/latest, times, delete."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import kafka_security
from switchyard.state_handoff.io.kafka_errors import unreachable

logger = logging.getLogger(__name__)

# A node of a cluster that has just gone down stays in the metadata the admin client starts from for a while;
# it answers NodeNotReadyError, not a failure of the cluster, until the metadata drops the node.
NODE_DOWN_GRACE_S = 20.0


def _client_kwargs(bootstrap: str) -> dict:
    return {"bootstrap_servers": bootstrap, "request_timeout_ms": 30000, **kafka_security.client_kwargs()}


@contextmanager
def admin_client(bootstrap: str) -> Iterator:
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError, NodeNotReadyError

    deadline = time.monotonic() + NODE_DOWN_GRACE_S
    while True:
        try:
            admin = KafkaAdminClient(**_client_kwargs(bootstrap))
            break
        except NodeNotReadyError as error:  # a node just stopped, still in the metadata: ask again
            if time.monotonic() > deadline:
                raise unreachable(bootstrap, error) from None
            time.sleep(0.5)
        except KafkaError as error:  # refused authentication surfaces as a failed connection or version probe
            raise unreachable(bootstrap, error) from None
    try:
        yield admin
    finally:
        admin.close()


def _new_consumer(bootstrap: str, request_timeout_ms: int | None = None, group: str | None = None):
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    timeout = {"request_timeout_ms": request_timeout_ms} if request_timeout_ms else {}
    if group is not None and request_timeout_ms:  # kafka-python wants the request timeout above the session's (it
        timeout["session_timeout_ms"] = request_timeout_ms - 1000  # never joins the group: the value goes unused)
    try:
        return KafkaConsumer(**{**_client_kwargs(bootstrap), **timeout}, enable_auto_commit=False, group_id=group,
                             consumer_timeout_ms=5000, isolation_level=kafka_security.ISOLATION)
    except KafkaError as error:  # refused authentication surfaces as a failed connection or version probe
        raise unreachable(bootstrap, error) from None


@contextmanager
def consumer(bootstrap: str) -> Iterator:
    client = _new_consumer(bootstrap)
    try:
        yield client
    finally:
        client.close()


def replication_factor(admin) -> int:
    """Replicas for a topic the project creates: min(3, brokers in the cluster)."""
    return max(1, min(3, len(admin.describe_cluster()["brokers"])))


def topic_configs(replicas: int, compacted: bool = False) -> dict[str, str]:
    configs = {"min.insync.replicas": "2"} if replicas >= 3 else {}
    if compacted:
        configs["cleanup.policy"] = "compact"
    return configs


def create_topic(bootstrap: str, topic: str, partitions: int, exist_ok: bool = False,
                 compacted: bool = False) -> bool:
    """Create `topic` with min(3, brokers) replicas; return False when it already existed (and exist_ok).

    `compacted`: Kafka keeps the newest record per key. An existing topic gets the settings it lacks (compaction
    among them), changed one by one: whatever its team set on it stays as set."""
    from kafka.admin import NewTopic
    from kafka.errors import TopicAlreadyExistsError

    with admin_client(bootstrap) as admin:
        if exist_ok and _exists(admin, topic):  # asking needs only a right on the topic, not on the cluster
            if compacted:
                set_missing_configs(bootstrap, topic, {"cleanup.policy": "compact"})
            return False
        replicas = replication_factor(admin)
        configs = topic_configs(replicas, compacted)
        try:
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=replicas,
                                          topic_configs=configs)])
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise UserError(f"topic {topic} already exists: pick another --topic or delete it") from None
            if compacted:
                set_missing_configs(bootstrap, topic, configs)
            return False
        _wait_until_served(admin, topic, partitions)
    return True


def _not_authorized() -> set:
    from confluent_kafka import KafkaError

    return {KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED}


def _exists(admin, topic: str) -> bool:
    from kafka.errors import KafkaConnectionError, UnknownTopicOrPartitionError

    for attempt in range(3):  # a TLS connection the broker closes as the client starts: asked again on a new one
        try:
            described = admin.describe_topics([topic])
            break
        except UnknownTopicOrPartitionError:
            return False
        except KafkaConnectionError:
            if attempt == 2:
                raise
            time.sleep(0.5)
    return any((d.get("topic") or d.get("name")) == topic and d["error_code"] == 0 for d in described)


def set_missing_configs(bootstrap: str, topic: str, configs: dict[str, str], timeout_s: float = 30.0) -> dict:
    """Set each of `configs` that `topic` has no value of its own for, by an incremental change that leaves every
    other setting as it is (a whole-config change resets the ones it does not name); return what was set."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ConfigSource

    admin = AdminClient(kafka_security.librdkafka_config(bootstrap))
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    try:
        current = admin.describe_configs([resource], request_timeout=timeout_s)[resource].result(timeout_s)
        missing = {name: value for name, value in configs.items() if name not in current or (
            current[name].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value and current[name].value != value)}
        if missing:
            change = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                for name, value in missing.items()])
            admin.incremental_alter_configs([change], request_timeout=timeout_s)[change].result(timeout_s)
    except KafkaException as error:
        if error.args and error.args[0].code() in _not_authorized():  # created ahead by those who may: theirs to set
            logger.warning(f"switchyard: topic {topic}: its settings {', '.join(configs)} are not this client's to read"
                           " or set (no DescribeConfigs or AlterConfigs right on it); they stay as its owners set them")
            return {}
        raise UserError(f"topic {topic} on {bootstrap}: its settings {', '.join(configs)} could not be read or set "
                        f"({error.args[0].str() if error.args else error}): check the client's rights on the "
                        "topic's configuration") from None
    return missing


def _wait_until_served(admin, topic: str, partitions: int, timeout_s: float = 30) -> None:
    """Brokers learn of a new topic from the controller a moment later; until each one has, a client that asks
    another broker may not see it (an empty description): wait until every live broker serves every partition.
    A broker that cannot be reached is not waited for: it learns the topic from the controller when it is back; one
    that lags longer than `timeout_s` (a 2-core machine under load) is named in a warning, not an error: the topic
    exists and clients ask again."""
    from kafka.errors import KafkaError
    from kafka.protocol.metadata import MetadataRequest

    waiting = {broker["node_id"] for broker in admin.describe_cluster()["brokers"]}
    deadline = time.monotonic() + timeout_s
    while waiting and time.monotonic() < deadline:
        for node in sorted(waiting):
            try:
                response = admin.send_request(MetadataRequest[1](topics=[topic]), node_id=node)
            except KafkaError:  # stopped a moment ago, still in the metadata
                waiting.discard(node)
                continue
            described = response.to_object()["topics"]
            if len([p for d in described for p in d["partitions"] if p["leader"] >= 0]) >= partitions:
                waiting.discard(node)
        if waiting:
            time.sleep(0.1)
    if waiting:  # the topic exists and the others serve it; a client asking a lagging broker asks again
        logger.warning(f"switchyard: topic {topic} was created, but brokers {sorted(waiting)} do not serve its "
                       f"{partitions} partitions yet after {timeout_s:.0f}s")


def topic_config(bootstrap: str, topic: str, wait_s: float = 10.0) -> dict[str, str]:
    """The topic's effective configuration. A topic created a moment ago may not have reached the broker asked
    yet (an error code, or no entries, on a multi-broker cluster): asked again until `wait_s` has passed."""
    from kafka.admin import ConfigResource, ConfigResourceType

    deadline = time.monotonic() + wait_s
    with admin_client(bootstrap) as admin:
        while True:
            error, message, _kind, _name, described = admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)])[0].resources[0][:5]
            if (error == 0 and described) or time.monotonic() >= deadline:
                break
            time.sleep(0.5)
    if error != 0:
        raise UserError(f"topic {topic} on {bootstrap}: its configuration could not be read ({message or error})")
    return {entry[0]: entry[1] for entry in described}


def _partitions(client, bootstrap: str, topic: str, wait_s: float = 5.0) -> list[int]:
    """The topic's partitions. A topic created a moment ago may not have reached the broker this client asks (on a
    cluster the controller knows it first): ask again for a few seconds before calling it missing."""
    deadline = time.monotonic() + wait_s
    while not (parts := client.partitions_for_topic(topic)):
        if time.monotonic() > deadline:
            raise UserError(f"topic {topic} does not exist on {bootstrap}: check --topic")
        time.sleep(0.25)
    return sorted(parts)


def partitions_of(bootstrap: str, topic: str) -> list[int]:
    with consumer(bootstrap) as client:
        return _partitions(client, bootstrap, topic)


def offset_bounds(bootstrap: str, topic: str) -> dict[int, tuple[int, int]]:
    """Per partition: (earliest retained offset, latest offset: the last stable offset, past every committed record
    and before any open transaction's first)."""
    from kafka import TopicPartition

    parts = partitions_of(bootstrap, topic)
    with consumer(bootstrap) as client:
        tps = [TopicPartition(topic, p) for p in parts]
        earliest = client.beginning_offsets(tps)
        latest = client.end_offsets(tps)
    return {tp.partition: (earliest[tp], latest[tp]) for tp in tps}


def record_offsets(bootstrap: str, topic: str, partition: int, start: int, end: int,
                   wait_s: float = 60.0) -> list[int] | None:
    """The offsets of the records a reader sees in [start, end) of a partition, in order: transaction markers,
    aborted records and compacted-away records take offsets no reader sees. None when Kafka no longer holds
    `start`."""
    from kafka import TopicPartition

    tp = TopicPartition(topic, partition)
    with consumer(bootstrap) as client:
        _partitions(client, bootstrap, topic)
        client.assign([tp])
        if client.beginning_offsets([tp])[tp] > start:
            return None
        stop = min(end, client.end_offsets([tp])[tp])
        client.seek(tp, start)
        seen: list[int] = []
        deadline = time.monotonic() + wait_s
        while client.position(tp) < stop:
            if time.monotonic() > deadline:
                raise UserError(f"{topic} partition {partition} on {bootstrap}: offsets {start}..{stop - 1} could "
                                f"not be read within {wait_s:.0f}s")
            for batch in client.poll(timeout_ms=1000).values():
                seen += [m.offset for m in batch if m.offset < end]
    return seen


def newest_records(bootstrap: str, topic: str, per_partition: int = 8, wait_s: float = 30.0) -> dict[int, list]:
    """Per partition of an existing `topic`, its newest records a reader sees: those among its last `per_partition`
    offsets (fewer where transaction markers sit among them), oldest first."""
    from kafka import TopicPartition

    with consumer(bootstrap) as client:
        tps = [TopicPartition(topic, p) for p in _partitions(client, bootstrap, topic)]
        client.assign(tps)
        earliest, ends = client.beginning_offsets(tps), client.end_offsets(tps)
        for tp in tps:
            client.seek(tp, max(earliest[tp], ends[tp] - per_partition))
        newest: dict[int, list] = {tp.partition: [] for tp in tps}
        deadline = time.monotonic() + wait_s
        while any(client.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise UserError(f"topic {topic} on {bootstrap}: its newest records could not be read within "
                                f"{wait_s:.0f}s")
            for tp, batch in client.poll(timeout_ms=500).items():
                newest[tp.partition] += [m for m in batch if m.offset < ends[tp]]
    return newest


def latest_offsets(bootstrap: str, topics: Iterable[str]) -> dict[str, dict[int, int]]:
    """Per topic and partition, the last stable offset (the end of what a read_committed reader sees now); one client
    for all of them."""
    with consumer(bootstrap) as client:
        return _ends(client, bootstrap, list(topics))


def _ends(client, bootstrap: str, topics: list[str]) -> dict[str, dict[int, int]]:
    from kafka import TopicPartition

    tps = [TopicPartition(topic, p) for topic in topics for p in _partitions(client, bootstrap, topic)]
    ends = client.end_offsets(tps)
    latest: dict[str, dict[int, int]] = {topic: {} for topic in topics}
    for tp in tps:
        latest[tp.topic][tp.partition] = ends[tp]
    return latest


def paced(records: Iterable, rate: float, stop=lambda: False, seconds: float | None = None,
          ahead_s: float = 0.001) -> Iterator:
    """`records` at `rate` per second from now, each taken from its source when it is due (a record stamped with
    the time is stamped as it is sent), until `stop()`, `seconds` have passed (at most `rate * seconds` records),
    or the records end. For `produce`: the steady input of `live`, the burst bench's trickle and the latency bench.

    Records due within `ahead_s` go at once: a sleep before each record of thousands a second costs the sender more
    CPU than sending them, CPU the stream under measurement shares on a small machine."""
    started = time.monotonic()
    source = iter(records)
    taken = 0
    while not stop():
        now = time.monotonic()
        due = started + taken / rate
        if seconds is not None and (now - started >= seconds or due - started >= seconds):
            return
        if due > now + ahead_s:
            time.sleep(min(due - now, 0.05))
            continue
        record = next(source, None)
        if record is None:
            return
        taken += 1
        yield record


def produce(bootstrap: str, topic: str, records: Iterable[tuple],
            on_progress=None, progress_every: int = 100_000, linger_ms: int = 50) -> int:
    """Send records in large batches and wait for every acknowledgement; return how many were sent.

    Each record is (key, value) or (key, value, partition, timestamp_ms); None lets Kafka choose. `linger_ms`:
    how long a record may wait for others to fill its batch (0 for a latency measurement). Through
    confluent-kafka (librdkafka, in C), not kafka-python, whose per-record Python work capped `generate` at
    about 14,000 records/s. Keys map to partitions as in the Java client (murmur2), so a key lands where
    kafka-python and Spark's sink put it.
    """
    from confluent_kafka import KafkaError, KafkaException, Producer

    failures: list = []
    fatal: list = []

    def delivered(error, _message) -> None:
        if error is not None:
            failures.append(error)

    def client_error(error) -> None:
        if error.fatal() or error.code() in (KafkaError._ALL_BROKERS_DOWN, KafkaError._AUTHENTICATION,
                                             KafkaError.SASL_AUTHENTICATION_FAILED):
            fatal.append(error)

    def check() -> None:
        if fatal:
            producer.purge()
            raise unreachable(bootstrap, KafkaException(fatal[0]))

    # Delivery reports for failures only: a Python callback per acknowledged record cost more than the send.
    producer = Producer({**kafka_security.librdkafka_config(bootstrap), "acks": "all", "linger.ms": linger_ms,
                         "batch.size": 1 << 20, "message.max.bytes": 8 << 20, "partitioner": "murmur2_random",
                         "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1 << 20,
                         "message.timeout.ms": 120_000, "on_delivery": delivered, "error_cb": client_error,
                         "delivery.report.only.error": True})
    send = producer.produce
    sent = 0
    next_progress = progress_every if on_progress else -1
    for record in records:
        if len(record) == 4:
            key, value, partition, timestamp_ms = record
        else:
            key, value, partition, timestamp_ms = (*record, None, None)[:4]
        try:
            send(topic, value, key, -1 if partition is None else partition, timestamp=timestamp_ms or 0)
        except BufferError:  # the local queue is full: let the broker catch up, then send it
            while True:
                producer.poll(0.05)
                check()
                try:
                    send(topic, value, key, -1 if partition is None else partition, timestamp=timestamp_ms or 0)
                    break
                except BufferError:
                    continue
        sent += 1
        if sent & 0x3FFF == 0:
            producer.poll(0)
            check()
        if sent == next_progress:
            on_progress(sent)
            next_progress += progress_every
    while producer.flush(1.0):
        check()
    if failures:
        raise RuntimeError(f"{len(failures)} of {sent} records were not acknowledged by {bootstrap}: {failures[0]!r}")
    return sent
