"""The details of the handoff log's entries, typed: one frozen dataclass per status that carries details, written in
one place (`as_details`: what `handoff_log.append` stores as the entry's JSON) and read in one place (`of`: the class
of the entry's status, filled from that JSON). Requests (REBASE_REQUESTED, STOP_REQUESTED, START_REQUESTED,
PREVIOUS_DROPPED) are not here: requests.py is their protocol, and `of` returns None for them rather than raising, so a
reader walking the whole log asks every entry alike; `request_id` and `reason` read what requests and other entries
both record.

Every field defaults to None, and a field left at None is not written: an entry holds the keys its writer set, and
a key it lacks reads as None. A key no field of its class names is refused when read (TypeError): the log holds this
switchyard's format only (state_handoff/format.py). A field named after a Python keyword ends in `_` (`from_`); its
JSON name does not. Nested records (a reconciliation, a cut, `at_cut`, `kafka_tail`, the definition) stay the dicts
their writers make."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from typing import ClassVar

from switchyard.state_handoff.control import requests
from switchyard.state_handoff.control.lifecycle import Status

PerPartition = dict  # partition -> a figure or a range; its keys are strings once read back from JSON


@dataclass(frozen=True, kw_only=True)
class Details:
    """What every entry's details share: their fields written and read under their JSON names."""

    STATUSES: ClassVar[frozenset[Status]] = frozenset()  # the statuses whose entries carry this class

    def as_details(self) -> dict:
        """The entry's JSON details: each field that is not None, under its JSON name."""
        return {_json_name(f.name): getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_details(cls, recorded: dict) -> Details:
        """From an entry's JSON details: a key missing reads as None; a key the class does not name is a TypeError."""
        names = {_json_name(f.name): f.name for f in fields(cls)}
        return cls(**{names.get(key, key): value for key, value in recorded.items()})


def _json_name(name: str) -> str:
    return name.removesuffix("_")


@dataclass(frozen=True, kw_only=True)
class BackfillStarted(Details):
    """A tiles run began over the archived days `from_`..`to` (ISO dates)."""

    STATUSES: ClassVar = frozenset({Status.BACKFILL_STARTED})
    from_: str | None = None
    to: str | None = None
    strategy: str | None = None  # how the tiles were aggregated: "sort" or "hash"


@dataclass(frozen=True, kw_only=True)
class BackfillCommitted(Details):
    """Every tile merged into keyed state: the boundary reached and the accounting of what was read (isBacklog
    ends). A rebase's commit at its cut records that cut and its reconciliation in `at_cut`."""

    STATUSES: ClassVar = frozenset({Status.BACKFILL_COMMITTED})
    from_: str | None = None
    to: str | None = None
    boundary: PerPartition | None = None  # the highest offset the backlog holds
    records_read: int | None = None
    well_formed: int | None = None
    dead_lettered: int | None = None
    keys: int | None = None
    accounting: PerPartition | None = None  # the tiles run's: read, well_formed, dead_lettered
    archive_accounting: PerPartition | None = None  # the whole archive's, likewise
    complete: bool | None = None  # every archived record is in the tiles, and no skipped file lies below the boundary
    records_not_backfilled: PerPartition | None = None
    unreadable_files: list[str] | None = None
    skipped_files: list[str] | None = None
    gaps: list[dict] | None = None  # what each skipped file holds (jobs/backfill/read.py's skipped_gaps)
    tiled_files: list[str] | None = None  # archive files in the tiles, relative to the archive
    duration_s: float | None = None
    tiles_s: dict | None = None  # the tiles run's steps, in seconds
    commit_s: dict | None = None  # the commit's steps, in seconds
    backlog: dict | None = None  # the merge of the tiles, for the next commit to start from (jobs/backfill/backlog.py)
    definition: dict | None = None  # state_handoff/language/definition.py's record
    kafka_tail: dict | None = None  # `--kafka-tail`: the topic's range folded in, and its accounting
    at_cut: dict | None = None  # a rebase's: its request, cut, pause and reconciliation
    mode: str | None = None  # "streaming-only": an empty backfill with no archive (benchmarks)
    restarted_from: str | None = None  # lost_offsets.restart_from_retained: the handoff this one restarts
    lost: PerPartition | None = None  # ... and the offsets [from, to) no phase read


@dataclass(frozen=True, kw_only=True)
class HandoffCommitted(Details):
    """The switch: the stream's start offsets are the entry's; here, how they were chosen. A rebase's handoff at its
    cut names its request and carries its reconciliation."""

    STATUSES: ClassVar = frozenset({Status.HANDOFF_COMMITTED})
    topic: str | None = None
    boundary_mode: str | None = None  # "offsets", "time" or "cut"
    boundary: PerPartition | None = None
    retained: PerPartition | None = None  # the topic's [earliest, latest] offsets when committed
    definition: dict | None = None
    # --boundary time: the boundary time, the overlap's span and the folder of its identities (ISO times)
    at: str | None = None
    overlap_since: str | None = None
    overlap_until: str | None = None
    overlap: str | None = None
    overlap_identities: int | None = None
    identity: str | None = None  # what makes an archived record the same in the tail, in words
    # a rebase's
    request_id: str | None = None
    previous_handoff: str | None = None
    reconciliation: dict | None = None  # jobs/rebase/reconciliation.py's report
    rebase_s: float | None = None  # the backlog phase at the cut, in seconds: its tiles run and commit included
    # lost_offsets.restart_from_retained
    restarted_from: str | None = None
    lost: PerPartition | None = None


@dataclass(frozen=True, kw_only=True)
class StreamStarted(Details):
    """A stream process started the handoff's queries (a first start, or a `restart` from their checkpoints)."""

    STATUSES: ClassVar = frozenset({Status.STREAM_STARTED})
    pid: int | None = None
    restart: bool | None = None
    topic: str | None = None
    spark_version: str | None = None  # the Spark that wrote the checkpoints (none recorded: 4.0.0)
    updates_topic: str | None = None  # none recorded: `<pipeline>.updates`
    updates_from: PerPartition | None = None  # where the handoff's updates begin on the updates topic
    added_partitions: PerPartition | None = None  # partitions the topic gained after the handoff: where each starts


@dataclass(frozen=True, kw_only=True)
class Switched(Details):
    """The keyed query's first batch, the seed with it, committed: isBacklog = false."""

    STATUSES: ClassVar = frozenset({Status.SWITCHED})
    seconds_since_start: float | None = None
    startup_s: dict | None = None  # the steps to it, in seconds
    seconds_since_process_start: float | None = None
    keyed_incarnation: str | None = None  # the keyed checkpoint that made the first batch
    request_id: str | None = None  # the rebase whose handoff switched


@dataclass(frozen=True, kw_only=True)
class Lag(Details):
    """CAUGHT_UP or FALLING_BEHIND: the input's lag per partition, and the stream's figures when it was measured
    (jobs/stream/monitor.py's measure_lag)."""

    STATUSES: ClassVar = frozenset({Status.CAUGHT_UP, Status.FALLING_BEHIND})
    offsets_behind: PerPartition | None = None
    latest_offsets: PerPartition | None = None
    input_rows_per_s: float | None = None
    processed_rows_per_s: float | None = None
    last_batch_ms: int | None = None
    stream_watermark: str | None = None
    batch_id: int | None = None
    update_batch_ms: int | None = None
    state_updates_behind: int | None = None


@dataclass(frozen=True, kw_only=True)
class Stopped(Details):
    """A clean stop: why, and the lag at the end."""

    STATUSES: ClassVar = frozenset({Status.STOPPED})
    reason: str | None = None
    offsets_behind: PerPartition | None = None


@dataclass(frozen=True, kw_only=True)
class Failed(Details):
    """A run that died, in the `phase` it died in ("backfill", "stream", "rebase"), with a rebase's request."""

    STATUSES: ClassVar = frozenset({Status.FAILED})
    phase: str | None = None
    reason: str | None = None
    request_id: str | None = None
    not_now: bool = False  # unavailable for the moment (Kafka, the registry): retried, never counted against a rebase


@dataclass(frozen=True, kw_only=True)
class Paused(Details):
    """A rebase stopped the stream at its cut (jobs/rebase/run.py's Cut, as its `as_details`)."""

    STATUSES: ClassVar = frozenset({Status.PAUSED})
    request_id: str | None = None
    reason: str | None = None
    cut: dict | None = None


@dataclass(frozen=True, kw_only=True)
class ReconciliationFailed(Details):
    """The state recomputed at the cut differs from the streamed one, and nothing replaced it; `resumable`: the paused
    stream can stream on."""

    STATUSES: ClassVar = frozenset({Status.RECONCILIATION_FAILED})
    request_id: str | None = None
    reason: str | None = None
    resumable: bool | None = None
    reconciliation: dict | None = None


@dataclass(frozen=True, kw_only=True)
class RebaseRefused(Details):
    """A rebase request refused before its pause: nothing paused."""

    STATUSES: ClassVar = frozenset({Status.REBASE_REFUSED})
    request_id: str | None = None
    reason: str | None = None


@dataclass(frozen=True, kw_only=True)
class RebaseAbandoned(Details):
    """A paused rebase given up (`rebase --abandon`), at the cut its pause recorded."""

    STATUSES: ClassVar = frozenset({Status.REBASE_ABANDONED})
    request_id: str | None = None
    reason: str | None = None
    cut: dict | None = None


CLASSES: dict[Status, type[Details]] = {
    status: cls for cls in (BackfillStarted, BackfillCommitted, HandoffCommitted, StreamStarted, Switched, Lag,
                            Stopped, Failed, Paused, ReconciliationFailed, RebaseRefused, RebaseAbandoned)
    for status in cls.STATUSES}


def of(entry) -> Details | None:
    """The details of a log entry, as the class of its status; None for a request (requests.read reads those)."""
    cls = CLASSES.get(entry.status)
    return None if cls is None else cls.from_details(json.loads(entry.details or "{}"))


def request_id(entry) -> str | None:
    """The id of the request an entry is, or of the rebase request it is a step of (its pause, failure, refusal or
    abandonment, the handoff at its cut and that handoff's SWITCHED); None for any other entry."""
    asked = requests.read(entry)
    return asked.request_id if asked is not None else getattr(of(entry), "request_id", None)


def reason(entry) -> str | None:
    """Why an entry was logged, when it says: a stop's, a failure's or a rebase step's reason, or a rebase request's."""
    asked = requests.read(entry)
    return getattr(asked if asked is not None else of(entry), "reason", None)
