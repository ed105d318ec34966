"""What a vacuum of `state` must keep, whatever its age: the snapshot the live handoff was committed with and the
one the latest backfill committed for the next handoff, until that handoff has SWITCHED; and the drained streamed
state a rebase paused at, until the handoff at its cut has SWITCHED.

A handoff records the `state` version its stream seeds from. The backfill's commit writes that snapshot as the
seed's files, but a stream that finds them missing (an interrupted write, a lost folder) and has no checkpoint yet
reads `state` at that version again (jobs/seed.py). The stream's own MERGEs and the next backfill replace every
file of it within minutes, so a vacuum by age alone would leave the handoff unable to start. Keeping the files of
these versions costs one copy of the state each; a time window as long as the handoff's life would keep every file
the stream's MERGEs ever replaced too. Once the handoff has SWITCHED, its seed is in the stream's checkpoint and
the version is never read again: it is released, so a handoff that lives a year keeps nothing past Delta's log
retention (a version the log no longer holds cannot be kept, and asking for it would fail every vacuum). A
rebase's reconciliation reads the paused state again whenever the rebase runs again (after a crash that came after
the recomputed state replaced it), so that version stays until the new handoff's stream has taken over.

What a vacuum of `tiles` must keep: the version an open redeploy's tiles replaced (a crash may leave its tiles in the
table for hours before `rebase --abandon` restores that version), then, handed off, the tiles of the definition it
replaced, for `switchyard rollback` to restore in one metadata commit instead of tiling the archive again, until
`switchyard redeploy --drop-previous`
lets them go (a PREVIOUS_DROPPED) or Delta's log retention on `tiles` (`delta.logRetentionDuration`, 30 days unless
set) no longer holds their version.
"""

from __future__ import annotations

from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.control.view import PipelineView


def kept_state_versions(view: PipelineView) -> list[int]:
    """The `state` versions whose files vacuum keeps: the live handoff's and the latest committed backfill's while
    their handoff has not SWITCHED, and the paused ones (control/ledger.py)."""
    switched = {e.handoff_id for e in view.entries if e.status == Status.SWITCHED}
    kept = set()
    for status in (Status.HANDOFF_COMMITTED, Status.BACKFILL_COMMITTED):
        entry = view.latest(status)
        if entry is not None and entry.state_version is not None and entry.handoff_id not in switched:
            kept.add(entry.state_version)
    return sorted(kept | set(view.ledger.paused_state_versions.values()))


def kept_tiles_versions(view: PipelineView) -> list[int]:
    """The `tiles` versions whose files vacuum keeps: the one an open redeploy replaced (its tiles may already have
    taken the table: `rebase --abandon` restores that version), and the previous definition's, until dropped."""
    kept = view.ledger.open_redeploy_tiles_versions
    previous = view.ledger.previous_definition
    if previous is not None and not previous.dropped and previous.tiles_version is not None:
        kept.add(int(previous.tiles_version))
    return sorted(kept)
