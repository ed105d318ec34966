"""The size limit of an input record, read once from the environment and checked at a command's start: a value
larger than it is dead-lettered as TOO_LARGE (well-formed or not) with its size and a bounded prefix."""

from __future__ import annotations

import os

from state_handoff.errors import UserError

# The dead-letter reason. No event is that large; parsing or collecting one costs memory the rest of a batch needs.
TOO_LARGE = "too_large"
MAX_RECORD_BYTES_ENV = "SWITCHYARD_MAX_RECORD_BYTES"
DEFAULT_MAX_RECORD_BYTES = 1 << 20
DEAD_LETTER_PREFIX_BYTES = 1 << 10


def max_record_bytes() -> int:
    """The largest record value parsed (SWITCHYARD_MAX_RECORD_BYTES, default 1 MiB), checked: a whole number of
    bytes, at least DEAD_LETTER_PREFIX_BYTES."""
    text = os.environ.get(MAX_RECORD_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_RECORD_BYTES
    try:
        limit = int(text)
    except ValueError:
        limit = -1
    if limit < DEAD_LETTER_PREFIX_BYTES:
        raise UserError(f"{MAX_RECORD_BYTES_ENV}={text} must be a whole number of bytes of at least "
                        f"{DEAD_LETTER_PREFIX_BYTES}: set it so, or unset it for {DEFAULT_MAX_RECORD_BYTES}")
    return limit
