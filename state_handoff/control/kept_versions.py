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

from switchyard.state_handoff.control import details, handoff_log, requests
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.tables import Tables


def kept_state_versions(tables: Tables) -> list[int]:
    """The `state` versions whose files vacuum keeps: the live handoff's and the latest committed backfill's while
    their handoff has not SWITCHED, and the paused ones."""
    entries = handoff_log.entries(tables)
    switched = {e.handoff_id for e in entries if e.status == Status.SWITCHED}
    kept = set()
    for status in (Status.HANDOFF_COMMITTED, Status.BACKFILL_COMMITTED):
        entry = next((e for e in reversed(entries) if e.status == status), None)
        if entry is not None and entry.state_version is not None and entry.handoff_id not in switched:
            kept.add(entry.state_version)
    return sorted(kept | set(paused_state_versions(entries).values()))


def paused_state_versions(entries: list) -> dict[str, int]:
    """By rebase request: the drained state version its pause recorded, until a handoff at or after the request's
    cut has SWITCHED (its own, or a later one that superseded it), or the request ended without replacing anything
    (refused by its reconciliation, or abandoned)."""
    paused, answered, ended = {}, set(), set()
    for e in entries:
        logged, request_id = details.of(e), details.request_id(e)
        if e.status == Status.PAUSED and request_id is not None:
            version = (logged.cut or {}).get("state_version")
            if version is not None:
                paused[request_id] = int(version)
        elif e.status == Status.HANDOFF_COMMITTED and request_id is not None:
            answered.add(request_id)
        elif e.status == Status.SWITCHED:
            ended |= answered  # a stream serves a state at or past every cut answered so far
        elif e.status == Status.RECONCILIATION_FAILED and logged.resumable and request_id is not None:
            ended.add(request_id)  # nothing was replaced: the stream goes on from its own state
        elif e.status == Status.REBASE_ABANDONED and request_id is not None:
            ended.add(request_id)  # given up: the paused stream resumes from its checkpoint
    return {r: v for r, v in paused.items() if r not in ended}


def previous_definition(entries: list) -> dict | None:
    """The definition the newest handed-off redeploy replaced, kept for `switchyard rollback` (None: no redeploy was
    handed off). Its `record` (the definition), `tiles_version` (the `tiles` version holding its tiles), `files` (the
    archive files those fold: the latest backfill before the redeploy's), `request_id` (the redeploy's),
    `handoff_id` (the handoff at the redeploy's cut), and `dropped`: a PREVIOUS_DROPPED let it go."""
    answered = {details.request_id(e): e.handoff_id for e in entries if e.status == Status.HANDOFF_COMMITTED}
    for asked in reversed(requests.of_kind(entries, Status.REBASE_REQUESTED)):
        redeploy = asked.fields.get("redeploy")
        if not redeploy or asked.request_id not in answered:
            continue
        before = next((e for e in reversed(entries) if e.seq < asked.seq and e.status == Status.BACKFILL_COMMITTED),
                      None)
        dropped = any(r.fields.get("redeploy_request") == asked.request_id
                      for r in requests.of_kind(entries, Status.PREVIOUS_DROPPED))
        return {"record": redeploy["record"], "tiles_version": redeploy.get("tiles_version"),
                "files": (details.of(before).tiled_files or []) if before is not None else [],
                "request_id": asked.request_id, "handoff_id": answered[asked.request_id], "dropped": dropped}
    return None


def kept_tiles_versions(tables: Tables) -> list[int]:
    """The `tiles` versions whose files vacuum keeps: the one an open redeploy replaced (its tiles may already have
    taken the table: `rebase --abandon` restores that version), and the previous definition's, until dropped."""
    entries = handoff_log.entries(tables)
    ended = {details.request_id(e) for e in entries
             if e.status in (Status.HANDOFF_COMMITTED, Status.REBASE_ABANDONED, Status.REBASE_REFUSED)}
    replaced = ((asked.request_id, (asked.fields.get("redeploy") or {}).get("tiles_version"))
                for asked in requests.of_kind(entries, Status.REBASE_REQUESTED))
    kept = {int(version) for request_id, version in replaced if version is not None and request_id not in ended}
    previous = previous_definition(entries)
    if previous is not None and not previous["dropped"] and previous["tiles_version"] is not None:
        kept.add(int(previous["tiles_version"]))
    return sorted(kept)
