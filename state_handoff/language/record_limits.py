"""The size limit of an input record, read once from the environment and checked at a command's start: a value
larger than it is dead-lettered as TOO_LARGE (well-formed or not) with its size and a bounded prefix."""

from __future__ import annotations

from switchyard.state_handoff import settings

# The dead-letter reason. No event is that large; parsing or collecting one costs memory the rest of a batch needs.
TOO_LARGE = "too_large"
MAX_RECORD_BYTES_ENV = "SWITCHYARD_MAX_RECORD_BYTES"
DEAD_LETTER_PREFIX_BYTES = 1 << 10  # the setting's least value (state_handoff/settings.py)


def max_record_bytes() -> int:
    """The largest record value parsed (SWITCHYARD_MAX_RECORD_BYTES), at least DEAD_LETTER_PREFIX_BYTES."""
    return settings.value(MAX_RECORD_BYTES_ENV)
