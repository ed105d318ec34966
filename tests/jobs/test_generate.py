"""`switchyard dev generate`: deterministic demo events, checked against an independent reading of the DESIGN.md
rules."""

from __future__ import annotations

import argparse
import io
import json
import math
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import lru_cache

import pytest
from kafka.partitioner.default import murmur2

from switchyard.jobs.cli.inputs import add_generate_command
from switchyard.jobs.inputs.generate import MALFORMED_KINDS, SPECIAL_KEYS, generate_records, run_generate
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io.kafka_io import offset_bounds
from tests.support.demo_events import ISO_UTC, parse_event

START = datetime(2026, 1, 1, tzinfo=UTC)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def records(events=5000, keys=1000, partitions=4, days=7, seed=7, malformed_rate=0.01):
    return list(generate_records(events=events, keys=keys, partitions=partitions, days=days, seed=seed,
                                 malformed_rate=malformed_rate))


@lru_cache(maxsize=None)
def _cached(events, keys, partitions, days, seed, malformed_rate):
    return tuple(records(events, keys, partitions, days, seed, malformed_rate))


def sample(events=5000, keys=1000, partitions=4, days=7, seed=7, malformed_rate=0.01):
    return _cached(events, keys, partitions, days, seed, malformed_rate)


def classify_malformed(value: bytes | None) -> str:
    """Which MALFORMED_KINDS entry a malformed value is, decided from its content."""
    if value is None:
        return "tombstone"
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8"
    try:
        doc = json.loads(text)
    except ValueError:
        return "not_json"
    if isinstance(doc, list):
        return "json_array"
    if isinstance(doc, str):
        return "json_string"
    if doc is None:
        return "json_null"
    if not isinstance(doc, dict):
        return "json_number"
    if "key" not in doc:
        return "missing_key"
    if doc["key"] == "":
        return "empty_key"
    if doc["key"] is None:
        return "null_key"
    if "event_time" not in doc:
        return "missing_event_time"
    if not ISO_UTC.fullmatch(doc["event_time"]):
        return "unparseable_event_time"
    try:
        datetime.fromisoformat(doc["event_time"])
    except ValueError:
        return "impossible_event_time"
    amount = doc.get("amount", "<missing>")
    if amount == "<missing>":
        return "missing_amount"
    if isinstance(amount, bool):
        return "boolean_amount"
    if isinstance(amount, str):
        return "string_amount"
    if math.isnan(amount):
        return "nan_amount"
    return "overflow_amount" if amount > 0 else "infinity_amount"


def test_same_seed_same_bytes_other_seed_other_bytes():
    first = records(events=3000, seed=11)
    assert first == records(events=3000, seed=11)
    assert first != records(events=3000, seed=12)
    assert len(first) == 3000
    for record in first:
        assert record.key is None or isinstance(record.key, bytes)
        assert record.value is None or isinstance(record.value, bytes)


def test_zipf_skew_most_popular_key_dominates():
    counts = Counter(e["key"] for r in sample() if (e := parse_event(r.value)))
    (top, top_n), (_, second_n) = counts.most_common(2)
    assert top == "key-000000"
    assert top_n > 1.5 * second_n
    assert top_n > 0.10 * sum(counts.values())
    assert len(counts) > 300  # a long tail, not a handful of keys


def test_malformed_share_and_every_kind_present():
    recs = sample()
    bad = [r for r in recs if parse_event(r.value) is None]
    assert abs(len(bad) / len(recs) - 0.01) < 0.002
    assert set(Counter(classify_malformed(r.value) for r in bad)) == set(MALFORMED_KINDS)
    assert not [r for r in records(events=2000, malformed_rate=0.0) if parse_event(r.value) is None]
    heavy = records(events=2000, malformed_rate=0.5)
    assert sum(parse_event(r.value) is None for r in heavy) == 1000


def test_garbage_bytes_are_neither_utf8_nor_json():
    garbage = [r.value for r in sample() if r.value is not None and classify_malformed(r.value) == "invalid_utf8"]
    assert garbage
    for value in garbage:
        with pytest.raises(UnicodeDecodeError):
            value.decode("utf-8")
        with pytest.raises(ValueError):
            json.loads(value)


def test_well_formed_events_have_the_demo_shape():
    good = [(r, e) for r in sample() if (e := parse_event(r.value))]
    assert len(good) == 4950
    for record, event in good:
        assert set(event) == {"event_id", "key", "event_time", "amount", "kind"}
        assert isinstance(event["event_id"], str) and event["event_id"]
        assert isinstance(event["kind"], str) and event["kind"]
        assert record.key == event["key"].encode("utf-8")
        event_ms = (datetime.fromisoformat(event["event_time"]) - EPOCH) // timedelta(milliseconds=1)
        assert record.timestamp_ms == event_ms
    kinds = Counter(e["kind"] for _, e in good)
    assert {"purchase", "refund", "view"} <= set(kinds)


def test_amounts_mostly_cents_some_negative_some_huge():
    amounts = [e["amount"] for r in sample(events=20000) if (e := parse_event(r.value))]
    normal = [a for a in amounts if -100 <= a <= 1000]
    assert len(normal) > 0.99 * len(amounts)
    assert all(round(a, 2) == a for a in normal)
    assert sum(a < 0 for a in amounts) > 0.05 * len(amounts)
    assert any(abs(a) >= 1e15 for a in amounts)
    assert all(abs(a) <= 10**18 for a in amounts)


def test_duplicate_event_ids_reuse_earlier_well_formed_ids():
    events = [e for r in sample(events=20000) if (e := parse_event(r.value))]
    seen: set[str] = set()
    duplicates = 0
    for event in events:
        if event["event_id"] in seen:
            duplicates += 1
        seen.add(event["event_id"])
    assert 5 <= duplicates <= 60  # ~0.1% of 19,800


def test_event_times_disorder_at_most_five_minutes_within_the_days():
    recs = sample(days=3)
    running_max = None
    behind = []
    for record in recs:
        running_max = record.timestamp_ms if running_max is None else max(running_max, record.timestamp_ms)
        behind.append(running_max - record.timestamp_ms)
    assert max(behind) <= 5 * 60 * 1000
    assert sum(b > 0 for b in behind) > 0.3 * len(recs)  # there is real disorder
    times = [datetime.fromisoformat(e["event_time"]) for r in recs if (e := parse_event(r.value))]
    assert min(times) >= START - timedelta(minutes=5)
    assert max(times) < START + timedelta(days=3)
    assert max(times) > START + timedelta(days=3) - timedelta(hours=1)  # spread over all the days
    running = None
    for t in times:
        running = t if running is None else max(running, t)
        assert running - t <= timedelta(minutes=5)


def test_kafka_key_and_partition_rules():
    partitions = 5
    recs = sample(partitions=partitions)
    keyless = 0
    for index, record in enumerate(recs):
        assert 0 <= record.partition < partitions
        if record.key is not None:
            assert record.partition == (murmur2(record.key) & 0x7FFFFFFF) % partitions
        else:
            keyless += 1
            assert record.partition == index % partitions
        if record.value is None:
            assert record.key is not None  # a tombstone keeps its key
            continue
        try:
            doc = json.loads(record.value.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            doc = None
        usable = doc.get("key") if isinstance(doc, dict) else None
        if isinstance(usable, str) and usable:
            assert record.key == usable.encode("utf-8")
        else:
            assert record.key is None
    assert keyless > 0
    assert len({r.partition for r in recs}) == partitions


def test_special_keys_present_and_round_trip():
    recs = sample(events=20000)
    keys = {e["key"] for r in recs if (e := parse_event(r.value))}
    assert set(SPECIAL_KEYS) <= keys
    for needle in ('"', ",", "\t", " ", "\\", "ü", "日本"):
        assert any(needle in k for k in keys), needle
    special = [r for r in recs if r.key is not None and r.key.decode("utf-8") in SPECIAL_KEYS]
    assert 0.005 * len(recs) < len(special) < 0.02 * len(recs)


@pytest.mark.parametrize(("kwargs", "flag"), [
    ({"events": 0}, "--events"), ({"keys": 0}, "--keys"), ({"partitions": 0}, "--partitions"),
    ({"days": 0}, "--days"), ({"malformed_rate": 1.0}, "--malformed-rate"),
    ({"malformed_rate": -0.1}, "--malformed-rate"), ({"seed": -1}, "--seed"),
])
def test_bad_arguments_name_the_flag(kwargs, flag):
    args = {"events": 10, "keys": 10, "partitions": 1, "days": 1, "seed": 1, "malformed_rate": 0.0, **kwargs}
    with pytest.raises(UserError, match=re.escape(flag)):
        run_generate("127.0.0.1:1", "t.never.created", **args)


def test_command_line_flags_and_defaults():
    parser = argparse.ArgumentParser()
    commands = parser.add_subparsers(dest="command")
    add_generate_command(commands, lambda p: p.add_argument("--bootstrap", default="b:1"))
    args = parser.parse_args(["generate", "--topic", "t", "--events", "5", "--keys", "3"])
    assert (args.topic, args.events, args.keys, args.partitions, args.days, args.seed, args.malformed_rate,
            args.bootstrap) == ("t", 5, 3, 4, 7, 42, 0.01, "b:1")
    assert callable(args.handler)
    with pytest.raises(SystemExit):
        parser.parse_args(["generate", "--events", "5", "--keys", "3"])


def test_produce_to_real_broker_and_partition_mismatch(bootstrap, topic_name):
    out = io.StringIO()
    summary = run_generate(bootstrap, topic_name, events=3000, keys=200, partitions=3, days=2, seed=5,
                           malformed_rate=0.02, out=out)
    assert "3000 events" in summary and "60 malformed" in summary and "3 partitions" in summary
    assert "events/s" in summary
    assert out.getvalue().strip().splitlines()[-1].startswith("generate: 3,000 of 3,000 events (100.0%)")
    bounds = offset_bounds(bootstrap, topic_name)
    assert sorted(bounds) == [0, 1, 2]
    assert sum(end - begin for begin, end in bounds.values()) == 3000
    expected = Counter(r.partition for r in records(events=3000, keys=200, partitions=3, days=2, seed=5,
                                                    malformed_rate=0.02))
    assert {p: end for p, (_, end) in bounds.items()} == dict(expected)
    with pytest.raises(UserError) as err:
        run_generate(bootstrap, topic_name, events=10, keys=5, partitions=5, days=1, seed=1, malformed_rate=0.0,
                     out=io.StringIO())
    assert topic_name in str(err.value) and "3" in str(err.value) and "5" in str(err.value)
