"""An independent reading of DESIGN.md's rule for a well-formed demo event (Z-suffixed UTC times only, as the
generator writes them), shared by the tests of the generator and the live producer."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime

ISO_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?Z")


def parse_event(value: bytes | None) -> dict | None:
    """The event if `value` is well-formed under DESIGN.md, else None (written independently of jobs.inputs.generate)."""
    if value is None:
        return None
    try:
        event = json.loads(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(event, dict):
        return None
    key = event.get("key")
    if not isinstance(key, str) or key == "":
        return None
    event_time = event.get("event_time")
    if not isinstance(event_time, str) or not ISO_UTC.fullmatch(event_time):
        return None
    try:
        datetime.fromisoformat(event_time)
    except ValueError:
        return None
    amount = event.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not math.isfinite(amount):
        return None
    return event
