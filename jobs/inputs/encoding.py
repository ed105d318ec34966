"""The demo pipeline's event value: one compact JSON object per record, in one field order.

`{"event_id":…,"key":…,"event_time":…,"amount":…,"kind":…}` with no spaces, strings escaped as JSON with
non-ASCII kept as UTF-8, event times in microseconds with a `Z`, amounts as Python's shortest round-trip repr.
Every producer of demo events encodes through here, so the stream, the archive and the tests see one shape.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from json.encoder import encode_basestring as json_string  # '"…"', escaped, non-ASCII kept (the C encoder)

__all__ = ["event_time_text", "event_value", "event_values", "json_string"]

EVENT_TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"


def event_time_text(when: datetime) -> str:
    """`when` (UTC, or any aware time, converted) as the event_time text: 2026-01-01T09:30:00.000000Z."""
    if when.tzinfo is not None and when.utcoffset():
        when = when.astimezone(UTC)
    return when.strftime(EVENT_TIME_FORMAT)


def event_value(event_id: str, key: str, event_time: str, amount: float, kind: str) -> bytes:
    """One demo event's value bytes; `event_time` is event_time_text's form, `amount` a number."""
    return (f'{{"event_id":{json_string(event_id)},"key":{json_string(key)},'
            f'"event_time":{json_string(event_time)},"amount":{amount!r},"kind":{json_string(kind)}}}').encode()


def event_values(event_ids: Iterable[str], keys_json: Iterable[str], event_times: Iterable[str],
                 amounts_json: Iterable[str], kinds_json: Iterable[str]) -> list[bytes]:
    """Many demo events' value bytes at once, for a generator that formats a chunk of records in one pass.

    Keys, amounts and kinds come as JSON text already (`json_string(key)`, a number's text): a generator that
    draws from a few keys and kinds escapes each once, and can write amounts no float repr gives (1e15).
    Event ids are escaped here; event times are event_time_text's form, which holds nothing to escape.
    """
    return [f'{{"event_id":{json_string(eid)},"key":{kj},"event_time":"{ts}","amount":{amt},"kind":{kind}}}'.encode()
            for eid, kj, ts, amt, kind in zip(event_ids, keys_json, event_times, amounts_json, kinds_json,
                                             strict=True)]
