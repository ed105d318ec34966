"""Where the stream keeps its checkpoints, and the progress caches beside them that `status` reads."""

from __future__ import annotations

import json

from state_handoff import storage
from state_handoff.storage import Uri
from state_handoff.tables import Tables


def stream_dir(tables: Tables, handoff_id: str | None = None) -> Uri:
    root = Uri(tables.stream_dir)
    return root / handoff_id if handoff_id else root


def progress_file(tables: Tables, handoff_id: str) -> Uri:
    """The running stream's progress cache for `status` and the Dagster sensor."""
    return stream_dir(tables, handoff_id) / "progress.json"


def write_json_atomically(path: str, payload: dict) -> None:
    storage.write_text_atomic(path, json.dumps(payload, default=str))


def read_json(path: str) -> dict | None:
    try:
        return json.loads(storage.read_text(path))
    except (FileNotFoundError, ValueError):
        return None
