"""The definition a pipeline's tables were made with, as its log records it: the newest backfill or handoff that
recorded one, and the one-line refusal, before any JVM, of a command under another (what a definition's version is
and what changed between two: language/definition.py)."""

from __future__ import annotations

from switchyard.state_handoff.control import details
from switchyard.state_handoff.control.handoff_log import LogEntry
from switchyard.state_handoff.control.lifecycle import Status
from switchyard.state_handoff.errors import UserError
from switchyard.state_handoff.language import definition
from switchyard.state_handoff.language.spec import Pipeline

RECORDED_BY = (Status.BACKFILL_COMMITTED, Status.HANDOFF_COMMITTED)


def recorded(entries) -> tuple[LogEntry, dict] | None:
    """The newest backfill or handoff that recorded its definition, and that record (None: none did yet; a
    streaming-only backfill, details `mode`, records none)."""
    for entry in reversed(list(entries)):
        if entry.status in RECORDED_BY:
            record = details.of(entry).definition
            if record is not None:
                return entry, record
    return None


def refuse_changed(pipeline: Pipeline, entries) -> None:
    """A UserError of one line when the pipeline's tables were made with another definition than `pipeline`."""
    found = recorded(entries)
    if found is None:
        return
    entry, record = found
    if record["version"] == definition.version(pipeline):
        return
    changed = definition.changes(record, pipeline) or ["its parts"]
    what = "backfill" if entry.status == Status.BACKFILL_COMMITTED else "handoff"
    raise UserError(f"pipeline {pipeline.name}'s definition changed since its {what} {entry.handoff_id} (its "
                    f"{', '.join(changed)}: version {record['version']} then, {definition.version(pipeline)} now): "
                    "its state, windows and checkpoints keep the recorded shape and are not rebuilt in place; "
                    + (f"`switchyard redeploy --pipeline {pipeline.name}` switches the changed one in at a cut, or "
                       "restore the recorded definition" if definition.refuse_redeploy(pipeline, record) is None else
                       "restore the recorded definition, or declare the changed one as a pipeline of another name and "
                       "archive, backfill, hand off and stream that"))
