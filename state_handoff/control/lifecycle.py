"""The lifecycle of a pipeline's handoffs: the statuses of the handoff log, which status may follow which, and
the phase a pipeline is in.

Every entry names a handoff id, and each id goes its own way through the statuses (a rebase ends one id's way and
starts another's). A REBASE_REQUESTED is a request, not a step: it may come at any time once the handoff is
committed (a `rebase` from the command line, while the stream is live or not) and leaves the handoff where it was.
So is a STOP_REQUESTED (`switchyard stop`, the Dagster `stop_stream` job): it names the lease of the stream it is
for, which obeys it wherever it runs and answers it with STOPPED. So is a START_REQUESTED (`switchyard start`):
it asks `switchyard serve` to run again a stream that a stop request ended. So is a PREVIOUS_DROPPED (`switchyard
redeploy --drop-previous`): the definition a redeploy replaced is no longer kept for `switchyard rollback`; nothing
answers it, and the phase is read past it. So is a REBASE_REFUSED: the answer to a rebase
request refused before its pause (what the rebase must read is gone or unreadable), which leaves the handoff
streaming, or stopped, as it was.

    new handoff id
      │        │
      ▼        │ (state committed with no tiles run of its own: the Dagster state asset, a rebase with no
    BACKFILL_STARTED   days to tile, a streaming-only start)
      │        │
      ▼        ▼
    BACKFILL_COMMITTED
      │
      ▼
    HANDOFF_COMMITTED
      │
      ▼
    STREAM_STARTED ─────────┐ (a restart of a handoff that had SWITCHED before)
      │                     │
      ▼                     ▼
    SWITCHED ───────────► CAUGHT_UP ◄──► FALLING_BEHIND

    and besides:
    STREAM_STARTED ◄── STREAM_STARTED, SWITCHED, CAUGHT_UP, FALLING_BEHIND, STOPPED, FAILED (a restart, also
                       after a crash that left no STOPPED)
    STOPPED        ◄── STREAM_STARTED, SWITCHED, CAUGHT_UP, FALLING_BEHIND (a clean stop)
    PAUSED         ◄── HANDOFF_COMMITTED and every later state but PAUSED (a rebase stops the stream at a cut; the
                       handoff at the cut is a new id, which starts again at the top)
    REBASE_ABANDONED ◄── PAUSED, FAILED (`switchyard rebase --abandon` gives up a paused rebase while the paused
                       stream can still resume from its checkpoint; STREAM_STARTED follows)
    RECONCILIATION_FAILED ◄── PAUSED, FAILED, RECONCILIATION_FAILED (the state recomputed at the cut differs from
                       the streamed one and nobody accepted the differences: nothing was replaced, and the paused
                       stream streams on, STREAM_STARTED, unless an earlier attempt wrote past its checkpoint)
    FAILED         ◄── every state, and as a handoff's first entry (a failure is recorded wherever it happens)

TRANSITIONS declares the arrows and REQUIRES what a status needs to have happened to its handoff before; both
are checked by `handoff_log.append` against the handoff's earlier entries, so a log can only record a way the
code really goes.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from switchyard.state_handoff.errors import Failed


class Status(StrEnum):
    """What an entry of the handoff log records (a StrEnum: each member equals its name as a string)."""

    BACKFILL_STARTED = "BACKFILL_STARTED"
    BACKFILL_COMMITTED = "BACKFILL_COMMITTED"
    HANDOFF_COMMITTED = "HANDOFF_COMMITTED"
    STREAM_STARTED = "STREAM_STARTED"
    SWITCHED = "SWITCHED"
    CAUGHT_UP = "CAUGHT_UP"
    FALLING_BEHIND = "FALLING_BEHIND"
    STOPPED = "STOPPED"
    FAILED = "FAILED"
    REBASE_REQUESTED = "REBASE_REQUESTED"
    PAUSED = "PAUSED"
    RECONCILIATION_FAILED = "RECONCILIATION_FAILED"
    STOP_REQUESTED = "STOP_REQUESTED"
    REBASE_REFUSED = "REBASE_REFUSED"
    REBASE_ABANDONED = "REBASE_ABANDONED"
    START_REQUESTED = "START_REQUESTED"
    PREVIOUS_DROPPED = "PREVIOUS_DROPPED"


S = Status
# A stream process logs these while its queries run: with no stream holding the lease, it died without a stop.
RUNNING = frozenset({S.STREAM_STARTED, S.SWITCHED, S.CAUGHT_UP, S.FALLING_BEHIND})
REBASING = frozenset({S.REBASE_REQUESTED, S.PAUSED})
# A request leaves its handoff where it was.
REQUESTS = frozenset({S.REBASE_REQUESTED, S.STOP_REQUESTED, S.START_REQUESTED, S.PREVIOUS_DROPPED})
# Asides that say nothing of where the pipeline stands: its phase is read past them.
NOTES = frozenset({S.PREVIOUS_DROPPED})
# ... and so does the refusal of a rebase request before its pause: requests and refusals are entries beside a
# handoff's way, not on it.
REFUSALS = frozenset({S.REBASE_REFUSED})
ASIDES = REQUESTS | REFUSALS
_RESTART = frozenset({S.STREAM_STARTED, S.PAUSED, S.FAILED})  # what a stream (or rebase) may do next, once it ran

# The latest status of a handoff (None: the id has no entry yet) -> the statuses that may follow it.
TRANSITIONS: dict[Status | None, frozenset[Status]] = {
    None: frozenset({S.BACKFILL_STARTED, S.BACKFILL_COMMITTED, S.FAILED}),
    S.BACKFILL_STARTED: frozenset({S.BACKFILL_COMMITTED, S.FAILED}),
    S.BACKFILL_COMMITTED: frozenset({S.HANDOFF_COMMITTED, S.FAILED}),
    S.HANDOFF_COMMITTED: frozenset({S.STREAM_STARTED, S.PAUSED, S.FAILED}),
    S.STREAM_STARTED: _RESTART | {S.SWITCHED, S.CAUGHT_UP, S.STOPPED},
    S.SWITCHED: _RESTART | {S.CAUGHT_UP, S.STOPPED},
    S.CAUGHT_UP: _RESTART | {S.FALLING_BEHIND, S.STOPPED},
    S.FALLING_BEHIND: _RESTART | {S.CAUGHT_UP, S.STOPPED},
    S.STOPPED: _RESTART,
    S.FAILED: _RESTART | {S.RECONCILIATION_FAILED, S.REBASE_ABANDONED},
    S.PAUSED: frozenset({S.FAILED, S.RECONCILIATION_FAILED, S.REBASE_ABANDONED}),
    S.RECONCILIATION_FAILED: _RESTART | {S.RECONCILIATION_FAILED},
    S.REBASE_ABANDONED: _RESTART,
}
# A status -> what its handoff must have logged before it (at any point, not only as the latest status).
REQUIRES: dict[Status, Status] = {
    S.STREAM_STARTED: S.HANDOFF_COMMITTED,
    S.PAUSED: S.HANDOFF_COMMITTED,
    S.RECONCILIATION_FAILED: S.PAUSED,
    S.REBASE_ABANDONED: S.PAUSED,
    S.REBASE_REFUSED: S.HANDOFF_COMMITTED,
    S.REBASE_REQUESTED: S.HANDOFF_COMMITTED,
    S.STOP_REQUESTED: S.HANDOFF_COMMITTED,
    S.START_REQUESTED: S.HANDOFF_COMMITTED,
    S.PREVIOUS_DROPPED: S.HANDOFF_COMMITTED,
    S.CAUGHT_UP: S.SWITCHED,
    S.FALLING_BEHIND: S.SWITCHED,
}


class LifecycleError(Failed):
    """An append the lifecycle does not allow: the log keeps only ways the code really goes."""


def current(history: Iterable[str]) -> Status | None:
    """A handoff's latest status from its statuses in log order, asides (requests, refusals) left out; None before
    any."""
    latest = None
    for status in history:
        if status not in ASIDES:
            latest = Status(status)
    return latest


def refusal(status: str, history: list[str]) -> str | None:
    """Why `status` may not follow a handoff's `history` (its statuses in log order), or None when it may."""
    status = Status(status)
    latest = current(history)
    if status not in ASIDES and status not in TRANSITIONS[latest]:
        allowed = ", ".join(s for s in Status if s in TRANSITIONS[latest])
        if latest is None:
            return f"the handoff has no entry yet, and its first must be one of {allowed}"
        return f"its latest status is {latest}, which only {allowed} may follow"
    needed = REQUIRES.get(status)
    if needed is not None and needed not in history:
        where = f"latest status {latest}" if latest else "no entry yet"
        return f"it needs an earlier {needed} of the same handoff, and there is none ({where})"
    return None


def check_transition(pipeline: str, handoff_id: str, status: str, history: list[str]) -> None:
    """Raise LifecycleError, in one line, when `status` may not follow the handoff's `history`."""
    reason = refusal(status, history)
    if reason is not None:
        raise LifecycleError(f"handoff log of pipeline {pipeline}: {status} refused for handoff {handoff_id}: "
                             f"{reason}")


def has_switched(entries: Iterable, handoff_id: str) -> bool:
    """The handoff logged SWITCHED (its first batch, with the seed, committed): a restart of it streams at once, and
    CAUGHT_UP may follow its STREAM_STARTED. `entries`: log entries, with `handoff_id` and `status`."""
    return any(e.handoff_id == handoff_id and e.status == S.SWITCHED for e in entries)


def goes_live(status: str, switched_before: bool) -> bool:
    """`status` makes its handoff live: SWITCHED, or a restart (STREAM_STARTED) of a handoff that had switched."""
    return status == S.SWITCHED or (status == S.STREAM_STARTED and switched_before)


class Phase(StrEnum):
    """Where a pipeline stands, as `switchyard status` says it."""

    NOT_STARTED = "not started"
    BACKLOG = "backlog"
    SWITCHING = "switching"
    STREAMING = "streaming"
    CAUGHT_UP = "caught up"
    FALLING_BEHIND = "falling behind"
    STOPPED = "stopped"
    GONE = "stopped (the stream process is gone without a clean stop)"
    FAILED = "failed"
    REBASE_REQUESTED = "rebase requested"
    STOP_REQUESTED = "stop requested"
    REBASING = "rebasing"
    RECONCILIATION_FAILED = "reconciliation failed (nothing replaced; the stream streams on)"
    REBASE_REFUSED = "rebase refused before its pause (nothing paused: the handoff goes on as it was)"
    REBASE_ABANDONED = "rebase abandoned (the paused stream resumes from its checkpoint)"
    START_REQUESTED = "start requested (`switchyard serve` runs the stream)"


PHASES: dict[Status | None, Phase] = {
    None: Phase.NOT_STARTED,
    S.BACKFILL_STARTED: Phase.BACKLOG,
    S.BACKFILL_COMMITTED: Phase.BACKLOG,
    S.HANDOFF_COMMITTED: Phase.SWITCHING,
    S.STREAM_STARTED: Phase.SWITCHING,
    S.SWITCHED: Phase.STREAMING,
    S.CAUGHT_UP: Phase.CAUGHT_UP,
    S.FALLING_BEHIND: Phase.FALLING_BEHIND,
    S.STOPPED: Phase.STOPPED,
    S.FAILED: Phase.FAILED,
    S.REBASE_REQUESTED: Phase.REBASE_REQUESTED,
    S.PAUSED: Phase.REBASING,
    S.RECONCILIATION_FAILED: Phase.RECONCILIATION_FAILED,
    S.STOP_REQUESTED: Phase.STOP_REQUESTED,
    S.REBASE_REFUSED: Phase.REBASE_REFUSED,
    S.REBASE_ABANDONED: Phase.REBASE_ABANDONED,
    S.START_REQUESTED: Phase.START_REQUESTED,
}
LIVE = frozenset({Phase.STREAMING, Phase.CAUGHT_UP, Phase.FALLING_BEHIND})


def gone(latest: str | None, stream_alive: bool) -> bool:
    """The latest status says a stream runs, but no stream process holds the pipeline: it died without a stop."""
    return (latest in RUNNING or latest == S.STOP_REQUESTED) and not stream_alive


def phase(latest: str | None, stream_alive: bool) -> Phase:
    """A pipeline's phase from its latest entry (of any handoff) and whether a stream process holds its lease."""
    if gone(latest, stream_alive):
        return Phase.GONE
    return PHASES[Status(latest) if latest is not None else None]
