"""What a vacuum of `state` must keep, whatever its age: the snapshot the live handoff was committed with, and the
one the latest backfill committed for the next handoff.

A handoff records the `state` version its stream seeds from. The backfill's commit writes that snapshot as the
seed's files, but a stream that finds them missing (an interrupted write, a lost folder) and has no checkpoint yet
reads `state` at that version again (jobs/seed.py). The stream's own MERGEs and the next backfill replace every
file of it within minutes, so a vacuum by age alone would leave the handoff unable to start. Keeping the files of
these versions costs one copy of the state each, however long the handoff lives; a time window as long as the
handoff's life would keep every file the stream's MERGEs ever replaced too.
"""

from __future__ import annotations

from state_handoff import handoff_log
from state_handoff.lifecycle import Status
from state_handoff.tables import Tables


def kept_state_versions(tables: Tables) -> list[int]:
    """The `state` versions whose files vacuum keeps: the live handoff's and the latest committed backfill's."""
    entries = handoff_log.entries(None, tables)
    kept = set()
    for status in (Status.HANDOFF_COMMITTED, Status.BACKFILL_COMMITTED):
        entry = next((e for e in reversed(entries) if e.status == status), None)
        if entry is not None and entry.state_version is not None:
            kept.add(entry.state_version)
    return sorted(kept)
