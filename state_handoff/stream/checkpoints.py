"""What a stream query's Spark checkpoint says, read from its files: which batches it planned and committed,
where each batch ends on the input topic, and which incarnation of the checkpoint it is. The stream reads them
to pause and to resume; the rebase reads them to find its cut."""

from __future__ import annotations

import json

from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.io import storage


def _batch_ids(checkpoint: str, log: str) -> list[int]:
    return sorted(int(name) for name in storage.list_dir(storage.join(checkpoint, log)) if name.isdigit())


def last_committed_batch(checkpoint: str) -> int | None:
    return max(_batch_ids(checkpoint, "commits"), default=None)


def last_planned_batch(checkpoint: str) -> int | None:
    """Spark writes a batch's offsets before it runs it: a planned batch past the last commit was interrupted."""
    return max(_batch_ids(checkpoint, "offsets"), default=None)


def batch_end_offsets(checkpoint: str, batch: int, topic: str) -> dict[int, int]:
    """Where batch `batch` of the query ends on `topic`, from the checkpoint's offset log."""
    offset_log = storage.join(checkpoint, "offsets", str(batch))
    for line in storage.read_text(offset_log).splitlines()[2:]:
        try:
            offsets = json.loads(line)
        except ValueError:
            continue
        if isinstance(offsets, dict) and topic in offsets:
            return {int(p): int(o) for p, o in offsets[topic].items()}
    raise UserError(f"the offset log {offset_log} names no offsets of topic {topic}: the checkpoint is damaged; "
                    "restore it from a backup")


def committed_end_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    batch = last_committed_batch(checkpoint)
    return None if batch is None else batch_end_offsets(checkpoint, batch, topic)


def planned_end_offsets(checkpoint: str, topic: str) -> dict[int, int] | None:
    batch = last_planned_batch(checkpoint)
    return None if batch is None else batch_end_offsets(checkpoint, batch, topic)


def checkpoint_incarnation(checkpoint: str) -> str | None:
    """The query id Spark keeps in the checkpoint's `metadata`: the same across restarts from that checkpoint,
    new with a new one. None when the checkpoint has none yet."""
    metadata = storage.join(checkpoint, "metadata")
    try:
        return json.loads(storage.read_text(metadata).splitlines()[0])["id"]
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, IndexError, TypeError):
        raise UserError(f"the stream checkpoint's metadata file {metadata} is corrupt: restore the "
                        "checkpoint from a backup, or start over with `switchyard backfill` and "
                        "`switchyard handoff`") from None
