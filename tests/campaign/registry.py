"""The campaign's Avro histories: a team's Avro pipeline (payments keyed by customer and currency, as
tests/jobs/test_avro_registry.py declares it) whose records name their writer schema by a registry id, against a
real schema registry this history starts on 127.0.0.1. What happens to the registry: a version registered while a
stream runs (a compatible one, or one the pipeline cannot read), a soft-deleted subject, the registry down and back.
The registry keeps its schemas in memory, so "back" is a new process given the same versions in the same order, as
a registry with its own storage would come back with them; the ids are checked to be the same.

The invariants: every record Kafka ever held is dead-lettered for the oracle's reason (oracle.classify_avro, over
the versions registered by the end) or aggregated, exactly once, and each key's state is the oracle's."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from datetime import datetime, timedelta, timezone
from pathlib import Path

from tests.support import oracle

SUBJECT = "registry.payments-value"
PIPELINE_REF = "registry_payments_pipeline:PIPELINE"
PIPELINE_NAME = "registry_payments"
NEVER = 999_999  # an id nobody registers: its records are dead-lettered as unknown
VERSIONS = ("v1", "v2", "v3", "text_amount")  # text_amount: an amount of another type, which the pipeline cannot read


def _schemas() -> dict:
    from tests.jobs.test_avro_registry import TEXT_AMOUNT, V1, V2, V3

    return {"v1": V1, "v2": V2, "v3": V3, "text_amount": TEXT_AMOUNT}


class Registry:
    """The history's schema registry: its process, the versions registered in order, and their ids."""

    def __init__(self, root: Path):
        from switchyard.deploy import schema_registry

        from tests.jobs.test_avro_registry import PIPELINE_MODULE, READER
        from tests.support.installed import install_pipeline

        self.home = schema_registry.default_home()
        schema_registry.build(self.home)
        self.port = schema_registry.free_port()
        self.url = schema_registry.url(self.port)
        self.proc = schema_registry.start(self.home, self.port)
        self.ids: dict[str, int] = {}
        self.site = root / "site"
        if not self.site.exists():
            import json

            install_pipeline(self.site, "registry_payments_pipeline", PIPELINE_NAME, PIPELINE_MODULE,
                             {"payment.avsc": json.dumps(READER)})
        if str(self.site) not in sys.path:
            sys.path.insert(0, str(self.site))
        self.register("v1")

    @property
    def env(self) -> dict:
        return {"SWITCHYARD_SCHEMA_REGISTRY_URL": self.url,
                "PYTHONPATH": os.pathsep.join([str(self.site), os.environ.get("PYTHONPATH", "")])}

    def register(self, version: str) -> int:
        from tests.support.registry import register

        status, answer = register(self.url, SUBJECT, _schemas()[version])
        if status != 200:
            raise RuntimeError(f"the registry refused {version}: {status} {answer}")
        self.ids.setdefault(version, answer["id"])
        return answer["id"]

    def soft_delete(self) -> None:
        from tests.support.registry import call

        call("DELETE", f"{self.url}/subjects/{SUBJECT}")

    def down(self, seconds: float) -> None:
        """Away for `seconds`, then back with the same versions under the same ids."""
        from switchyard.deploy import schema_registry

        schema_registry.stop(self.proc)
        time.sleep(seconds)
        self.proc = schema_registry.start(self.home, self.port)
        before, self.ids = self.ids, {}
        for version in sorted(before, key=before.get):
            if self.register(version) != before[version]:
                raise RuntimeError(f"the registry came back with another id for {version}: {self.ids} != {before}")

    def close(self) -> None:
        from switchyard.deploy import schema_registry

        with contextlib.suppress(Exception):
            schema_registry.stop(self.proc)


class AvroProducer:
    """The payments of each produce step: under a registered version's id, the unreadable one's, an id nobody
    registered, or bytes that are not Confluent's framing at all."""

    def __init__(self, registry: Registry):
        self.registry = registry
        self.next = 0

    def records(self, kind: str, count: int, seed: int, partitions: int) -> list[tuple]:
        import random

        from tests.jobs.test_avro_registry import _framed

        rng = random.Random(seed)
        schemas, ids = _schemas(), self.registry.ids
        readable = [v for v in ("v1", "v2", "v3") if v in ids]
        start, out = datetime(2026, 3, 1, tzinfo=timezone.utc), []
        for _ in range(count):
            i, self.next = self.next, self.next + 1
            record = {"payment_id": f"p{i}", "customer": f"c{rng.randrange(9)}", "paid_at": start + timedelta(
                      minutes=i), "amount": round(rng.uniform(-50, 400), 2), "currency": rng.choice(("EUR", "USD")),
                      "note": None, "channel": "app"}
            which = kind if kind in ids else rng.choice(readable)
            if kind == "malformed":
                value = b"\x01not framed" if rng.random() < 0.5 else None
            elif kind == "unknown":
                value = _framed(schemas["v1"], NEVER, record)
            else:
                if which == "text_amount":
                    record["amount"] = f"{record['amount']}"
                value = _framed(schemas[which], ids[which], record)
            out.append((record["customer"].encode(), value, rng.randrange(partitions), None))
        return out


def invariants(spark, world) -> list[str]:
    """The Avro pipeline's tables against the oracle over every record the topic ever held."""
    from switchyard.state_handoff.language.pipelines import get_pipeline
    from tests.support.compare import close, rows

    pipeline = get_pipeline(PIPELINE_REF)
    ids = world.registry.ids
    writers = {ids[v]: _schemas()[v] for v in ("v1", "v2", "v3") if v in ids}
    incompatible = frozenset({ids["text_amount"]} if "text_amount" in ids else ())
    records = world.read_all()
    expected_dead, groups = {}, {}
    for r in records:
        reason, event = oracle.classify_avro(r.value, pipeline.fields, pipeline.avro, writers, incompatible)
        if reason:
            expected_dead[(r.partition, r.offset)] = reason
        else:
            groups.setdefault((event["customer"], event["currency"]), []).append(event)
    found = []
    dead_rows = rows(spark, world.tables.dead_letter)
    counted = Counter((d.kafka_partition, d.kafka_offset) for d in dead_rows)
    found += [f"dead-lettered {n} times: {k}" for k, n in counted.items() if n > 1][:5]
    dead = {(d.kafka_partition, d.kafka_offset): d.reason for d in dead_rows}
    found += [f"not dead-lettered: {k} ({why})" for k, why in sorted(expected_dead.items()) if k not in dead][:5]
    found += [f"dead-lettered but well-formed: {k} as {dead[k]}" for k in sorted(set(dead) - set(expected_dead))][:5]
    found += [f"dead-lettered as {dead[k]}, the oracle says {why}: {k}" for k, why in sorted(expected_dead.items())
              if k in dead and dead[k] != why][:5]
    state = {(r.customer, r.currency): r for r in rows(spark, world.tables.state)}
    for key in sorted(set(state) | set(groups)):
        events, got = groups.get(key, []), state.get(key)
        want_sum = sum(e["amount"] for e in events)
        if got is None or not events:
            found.append(f"state of {key}: {'missing' if got is None else 'not expected'}")
        elif got.payments != len(events) or not close(got.paid, want_sum, sum(abs(e["amount"]) for e in events)):
            found.append(f"state of {key}: {got.payments} payments, {got.paid} paid; the oracle says {len(events)}, "
                         f"{want_sum}")
    return found
