"""Where a handoff's stream keeps its files: the seed, one checkpoint per query, the overlap records, and the
progress caches beside them that `status` and the Dagster sensor read. The one owner of these paths: the stream,
the rebase and the backfill's commit all find the folders here."""

from __future__ import annotations

import json
from dataclasses import dataclass

from switchyard.state_handoff.io import storage
from switchyard.state_handoff.io.storage import Uri
from switchyard.state_handoff.stream.progress import EVENTS, STATE
from switchyard.state_handoff.tables import Tables

KEYED = "keyed"  # the query that writes no Delta table; EVENTS and STATE name the other two (stream_progress)

# What a handoff's stream needs to run, or to run again: the seed (a copy of the state), the query checkpoints (the
# keyed one holds the state store, another copy) and a time-mode handoff's overlap records.
RUN_PARTS = ("seed", "checkpoints", "overlap")


def stream_dir(tables: Tables, handoff_id: str | None = None) -> Uri:
    root = Uri(tables.stream_dir)
    return root / handoff_id if handoff_id else root


@dataclass
class StreamPaths:
    """The handoff's stream folder (a local path or an object-store URL): the seed's files, one checkpoint per
    query, and caches for `status`."""

    root: Uri

    @property
    def seed(self) -> Uri:
        return self.root / "seed"

    @property
    def seed_written(self) -> Uri:
        """Spark's job commit writes `_SUCCESS` last: present means every seed file is in place."""
        return self.root / "seed" / "_SUCCESS"

    @property
    def keyed_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "keyed"

    @property
    def events_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "events"

    @property
    def state_checkpoint(self) -> Uri:
        return self.root / "checkpoints" / "state"

    @property
    def checkpoints(self) -> dict[str, Uri]:
        return {KEYED: self.keyed_checkpoint, EVENTS: self.events_checkpoint, STATE: self.state_checkpoint}

    @property
    def progress(self) -> Uri:
        return self.root / "progress.json"

    @property
    def recent_progress(self) -> Uri:
        """Each query's last batches, kept when the stream stops (jobs/stream/queries.py: keep_recent_progress)."""
        return self.root / "recent_progress.json"

    @staticmethod
    def of(tables: Tables, handoff_id: str) -> "StreamPaths":
        return StreamPaths(stream_dir(tables, handoff_id))


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


def write_json_atomically(path: str, payload: dict) -> None:
    storage.write_text_atomic(path, json.dumps(payload, default=str))


def read_json(path: str) -> dict | None:
    try:
        return json.loads(storage.read_text(path))
    except (FileNotFoundError, ValueError):
        return None
