"""Where the stream keeps its checkpoints, and the progress caches beside them that `status` reads."""

from __future__ import annotations

import json

from state_handoff import storage
from state_handoff.storage import Uri
from state_handoff.tables import Tables


def stream_dir(tables: Tables, handoff_id: str | None = None) -> Uri:
    root = Uri(tables.stream_dir)
    return root / handoff_id if handoff_id else root


# What a handoff's stream needs to run, or to run again: the seed (a copy of the state), the query checkpoints (the
# keyed one holds the state store, another copy) and a time-mode handoff's overlap records.
RUN_PARTS = ("seed", "checkpoints", "overlap")


def prune_earlier_streams(tables: Tables, handoff_id: str, entries: list) -> list[str]:
    """Delete what the streams of handoffs logged before `handoff_id` needed to run (RUN_PARTS); their progress
    caches and process logs stay. Called once `handoff_id` is live: a stream always runs the latest committed
    handoff, so an earlier one's checkpoints are never resumed again, and each is about twice the state's size
    (a pipeline rebased daily would otherwise keep a year of them). Returns the handoffs whose folders it pruned."""
    order = list(dict.fromkeys(e.handoff_id for e in entries))
    pruned = []
    for earlier in order[:order.index(handoff_id)] if handoff_id in order else []:
        folder = stream_dir(tables, earlier)
        present = [part for part in storage.list_dir(folder) if part in RUN_PARTS]  # one listing, not one per part
        for part in present:
            storage.delete_tree(folder / part)
        if present:
            pruned.append(earlier)
    return pruned


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
