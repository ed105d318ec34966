"""One owner per pipeline at a time: a lease kept in the warehouse, in the Delta table `leases`, through delta-rs.

The table holds one row, the latest lease: who (host, boot, pid and the process's start, command), since when, its
last heartbeat and when it expires, whether it was released, and its epoch (the version of the commit that took it).
Every change is one commit that overwrites that row, made by compare-and-swap on the table version
(state_handoff/io/delta_cas.py): a writer decides on version v and commits at exactly v + 1, so two acquirers can
never both see the pipeline free and both take it. The row's `seq` is the version of the commit that wrote it.

A lease is held while it is not released and not expired (SWITCHYARD_LEASE_SECONDS, default 60 s, renewed every
sixth of that). Its length is the holder's, as its row records it (`Owner.seconds`): the holder renews for it and
stops writing by it, and a taker waits by it, so processes with different settings agree on one lease. On the
owner's own boot of its host (and in its pid namespace), an owner whose process is gone (no such pid, or a pid now
used by a process that started at another time) frees it at once. Elsewhere nobody trusts another host's clock: a row
whose expiry has passed is taken only once its version has stayed unchanged for a whole lease of the holder's length
on the taker's own clock. The owner in turn stops writing once its own monotonic clock (counting suspended
time) says a lease has nearly passed since it last began a renewal that succeeded (`Lease.check_fresh`), and
whatever it still tries to commit is refused by the fence the next owner raised (state_handoff/io/fencing.py).
Heartbeats add a commit every few seconds forever, so the table keeps itself small: delta-rs writes a checkpoint
every CHECKPOINT_INTERVAL commits and then drops log files older than the retention (two expiries), and the
committer of every CHECKPOINT_INTERVAL-th version vacuums the replaced row files.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timedelta
from typing import Iterator

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError, TableNotFoundError

from switchyard.state_handoff import settings
from switchyard.state_handoff.clock import as_utc, utc_now
from switchyard.state_handoff.control import processes
from switchyard.state_handoff.errors import Failed, NotNow
from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.io.archive_files import record_uri
from switchyard.state_handoff.io.delta_cas import commit_next, open_or_create, read
from switchyard.state_handoff.io.storage import delta_options
from switchyard.state_handoff.tables import Tables

ARCHIVE = "switchyard archive"
BACKFILL = "switchyard backfill"
HANDOFF = "switchyard handoff"
STREAM = "switchyard stream"
REBASE = "switchyard rebase"

ENV = "SWITCHYARD_LEASE_SECONDS"
HEARTBEATS_PER_LEASE = 6
CHECKPOINT_INTERVAL = 20
COMMIT_ATTEMPTS = 100
READ_ATTEMPTS = 3
FRESH_PART = 5 / 6  # of a lease after a renewal began: past it the owner writes nothing until it renews again

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema([
    ("seq", pa.int64()),
    ("lease_id", pa.string()),
    ("owner_host", pa.string()),
    ("owner_pid", pa.int64()),
    ("command", pa.string()),
    ("acquired_at", UTC_TIMESTAMP),
    ("heartbeat_at", UTC_TIMESTAMP),
    ("expires_at", UTC_TIMESTAMP),
    ("released", pa.bool_()),
    ("epoch", pa.int64()),
    ("owner_boot_id", pa.string()),
    ("owner_started", pa.int64()),
])

log = logging.getLogger(__name__)


class LeaseLost(Failed):
    """The lease ran out and another owner took the pipeline: whoever held it must stop writing."""


def lease_seconds() -> float:
    return settings.value(ENV)


@dataclass(frozen=True)
class Owner:
    """The lease row: who holds (or last held) the pipeline."""

    seq: int
    lease_id: str
    owner_host: str
    owner_pid: int
    command: str
    acquired_at: datetime
    heartbeat_at: datetime
    expires_at: datetime
    released: bool
    epoch: int
    owner_boot_id: str | None  # None from a host with no boot id to read (no /proc)
    owner_started: int | None

    def gone(self) -> bool:
        """Whether its process is provably gone: only on the owner's own boot of its host (on its host, when the
        owner's host named no boot)."""
        if self.owner_boot_id is not None:
            return (self.owner_boot_id == processes.boot_id()
                    and not processes.process_alive(self.owner_pid, self.owner_started))
        return self.owner_host == socket.gethostname() and not processes.process_alive(self.owner_pid)

    @property
    def seconds(self) -> float:
        """How long its holder's lease lasts unrenewed: the length it renews for, recorded in the row."""
        return (self.expires_at - self.heartbeat_at).total_seconds()

    def holds(self, now: datetime) -> bool:
        """Whether it holds the pipeline by its own expiry. Taking it over asks more (`acquire`)."""
        return not self.released and self.expires_at > now and not self.gone()

    def describe(self, now: datetime) -> str:
        since = self.acquired_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        beat = max(0, round((now - self.heartbeat_at).total_seconds()))
        left = max(0, round((self.expires_at - now).total_seconds()))
        return (f"`{self.command}` (pid {self.owner_pid} on host {self.owner_host}), running since {since}, "
                f"heartbeat {beat}s ago, expires in {left}s")


def _retention_seconds(expiry: float) -> int:
    """How long replaced log and row files stay: far longer than any reader or writer needs one, which is
    milliseconds; a writer stalled past it could commit unseen, which the read after each commit catches."""
    return max(1, round(2 * expiry))


def _open(tables: Tables) -> DeltaTable:
    retention = f"interval {_retention_seconds(lease_seconds())} seconds"
    return open_or_create(tables.leases, SCHEMA, name="leases",
                          description="the pipeline's owner: one row, replaced by compare-and-swap on the version",
                          configuration={"delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
                                         "delta.enableExpiredLogCleanup": "true",
                                         "delta.logRetentionDuration": retention,
                                         "delta.deletedFileRetentionDuration": retention})


def _latest(table: DeltaTable) -> Owner | None:
    rows = read(table, order_by="seq").to_pylist()
    if not rows:
        return None
    row = rows[-1]
    return Owner(**{**row, **{k: as_utc(row[k]) for k in ("acquired_at", "heartbeat_at", "expires_at")}})


def latest_row(uri: str) -> Owner | None:
    """The latest lease row at `uri`, from a fresh snapshot; None when there has never been one."""
    for attempt in range(READ_ATTEMPTS):
        try:
            return _latest(DeltaTable(uri, storage_options=delta_options(uri)))
        except TableNotFoundError:
            return None
        except (DeltaError, OSError):  # a file of the snapshot vacuumed under a very slow reader: read again
            if attempt == READ_ATTEMPTS - 1:
                raise
    return None


def owner(tables: Tables) -> Owner | None:
    """Whoever holds the pipeline now, or None when it is free."""
    current = latest_row(tables.leases)
    return current if current is not None and current.holds(utc_now()) else None


def refuse_if_owned(tables: Tables) -> None:
    """Raise UserError naming the owner when the pipeline is held: a check for failing early, not a lease."""
    current = owner(tables)
    if current is not None:
        raise _refusal(tables, current, utc_now())


def _refusal(tables: Tables, current: Owner, now: datetime) -> NotNow:
    """Not now: the lease is another process's for the moment (a standby `serve` waits and tries again)."""
    return NotNow(f"pipeline {tables.pipeline} is owned by {current.describe(now)}: already running, stop it "
                  "or wait for the lease to expire")


def stream_running(tables: Tables) -> bool:
    """A `switchyard stream` holds the pipeline."""
    current = owner(tables)
    return current is not None and current.command == STREAM


def _rows(row: Owner) -> pa.Table:
    return pa.Table.from_pylist([asdict(row)], SCHEMA)


def _commit(tables: Tables, table: DeltaTable, row: Owner) -> bool:
    """Replace the lease row at the version after `table`'s and read it back; False when another writer came
    first (or a stalled commit landed where nobody reads it)."""
    if not commit_next(table, _rows(row), mode="overwrite"):
        return False
    if row.seq % CHECKPOINT_INTERVAL == 0:
        _vacuum(table)
    current = latest_row(tables.leases)
    return current is not None and current.lease_id == row.lease_id and current.seq >= row.seq


def _vacuum(table: DeltaTable) -> None:
    """Delete row files replaced longer than the retention ago (and any a crashed writer left unreferenced)."""
    try:
        table.vacuum(dry_run=False, full=True)
    except DeltaError as err:  # a concurrent commit or a slow store: the next round vacuums
        log.warning("lease table %s: vacuum skipped: %s", table.table_uri, err)


class Lease:
    """A held lease. `heartbeat()` renews it; `lost` says why it was lost (None while held); `check_fresh()` before
    a write."""

    def __init__(self, tables: Tables, row: Owner, renewed: float):
        self.tables, self.row = tables, row
        self.lost: str | None = None
        self._renewed = renewed  # this host's monotonic clock when the newest successful renewal began
        self.seconds = row.seconds  # its length, as taken: renewed for and checked by, whatever the setting now
        self._lock = threading.Lock()

    @property
    def lease_id(self) -> str:
        return self.row.lease_id

    @property
    def epoch(self) -> int:
        """The version of the commit that took the lease: a later holder's is larger."""
        return self.row.epoch

    def check(self) -> None:
        """Raise LeaseLost once the lease is lost."""
        if self.lost:
            raise LeaseLost(self.lost)

    def check_fresh(self) -> None:
        """Raise LeaseLost when the lease is lost, or may have lapsed by this process's own monotonic clock: no
        renewal has succeeded for most of a lease (a process frozen, suspended or cut off from the store), so
        another host may be about to take the pipeline. Writing may go on once a renewal succeeds again."""
        self.check()
        idle = processes.monotonic() - self._renewed
        if idle >= FRESH_PART * self.seconds:
            raise LeaseLost(f"pipeline {self.tables.pipeline}: the lease of `{self.row.command}` (pid "
                            f"{self.row.owner_pid}) has not been renewed for {idle:.1f}s of its {self.seconds:g}s: "
                            "it may have passed to another owner, so this process writes nothing more")

    def lose(self, reason: str) -> LeaseLost:
        """Record the lease lost for `reason`; the LeaseLost to raise."""
        self.lost = self.lost or reason
        return LeaseLost(self.lost)

    def heartbeat(self) -> None:
        """Renew the lease for another expiry from now; LeaseLost when someone else holds the pipeline now."""
        with self._lock:
            self.check()
            for _ in range(COMMIT_ATTEMPTS):
                began = processes.monotonic()
                table = _open(self.tables)
                current = _latest(table)
                if current is None or current.lease_id != self.lease_id or current.released:
                    raise self.lose(self._taken_by(current))
                now = utc_now()
                renewal = replace(current, seq=table.version() + 1, heartbeat_at=now,
                                  expires_at=now + timedelta(seconds=self.seconds))
                if _commit(self.tables, table, renewal):
                    self.row, self._renewed = renewal, began
                    return
            raise Failed(f"lease of pipeline {self.tables.pipeline}: no commit after {COMMIT_ATTEMPTS} attempts")

    def _taken_by(self, current: Owner | None) -> str:
        what = f"pipeline {self.tables.pipeline}: the lease of `{self.row.command}` (pid {self.row.owner_pid})"
        if current is None or current.lease_id == self.lease_id:
            return f"{what} was released"
        return f"{what} expired and was taken by {current.describe(utc_now())}"

    def release(self) -> None:
        """Give the pipeline up, if this lease still holds it."""
        with self._lock:
            for _ in range(COMMIT_ATTEMPTS):
                table = _open(self.tables)
                current = _latest(table)
                if current is None or current.lease_id != self.lease_id or current.released:
                    return
                now = utc_now()
                released = replace(current, seq=table.version() + 1, heartbeat_at=now, expires_at=now,
                                   released=True)
                if _commit(self.tables, table, released):
                    self.row = released
                    return


def acquire(tables: Tables, command: str) -> Lease:
    """Take the pipeline for `command`, or raise UserError naming the owner who holds it.

    An owner whose row has expired by the clock that wrote it is taken over only after its row's version has stayed
    unchanged for a whole lease of the owner's length (its row's, not this process's setting) on this host's
    monotonic clock (the wait is logged): a live owner renews within it, whatever the two hosts' clocks and settings
    say, and stops writing before it ends (`Lease.check_fresh`). The lease taken lasts this process's setting."""
    lease_id = uuid.uuid4().hex[:12]
    watched: tuple[int, float] | None = None  # the version of an expired row, and since when it stayed unchanged
    attempts = 0
    while True:
        began = processes.monotonic()
        table = _open(tables)
        current = _latest(table)
        now = utc_now()
        if current is not None and current.holds(now):
            raise _refusal(tables, current, now)
        if current is not None and not current.released and not current.gone():
            version = table.version()
            if watched is None or watched[0] != version:
                watched = (version, began)
                log.warning("pipeline %s: the lease of %s expired by its own clock; taking it once it stays "
                            "unrenewed for its %gs", tables.pipeline, current.describe(now), current.seconds)
            waited = began - watched[1]
            if waited < current.seconds:
                time.sleep(min(1.0, current.seconds - waited))
                continue
        seq = table.version() + 1
        row = Owner(seq=seq, lease_id=lease_id, owner_host=socket.gethostname(), owner_pid=os.getpid(),
                    command=command, acquired_at=now, heartbeat_at=now,
                    expires_at=now + timedelta(seconds=lease_seconds()), released=False, epoch=seq,
                    owner_boot_id=processes.boot_id(), owner_started=processes.started_at(os.getpid()))
        if _commit(tables, table, row):
            return Lease(tables, row, began)
        attempts += 1
        if attempts >= COMMIT_ATTEMPTS:
            raise Failed(f"lease of pipeline {tables.pipeline}: no commit after {COMMIT_ATTEMPTS} attempts; "
                         "too many concurrent owners")


def _keep_alive(lease: Lease, every: float, stop: threading.Event) -> None:
    while not stop.wait(every):
        try:
            lease.heartbeat()
        except LeaseLost:
            return
        except Exception as err:  # the store may be away for a moment: retry until the lease would run out
            if utc_now() >= lease.row.expires_at:
                lease.lose(f"pipeline {lease.tables.pipeline}: the lease of `{lease.row.command}` expired "
                            f"unrenewed: {err}")
                return
            log.warning("lease of pipeline %s: heartbeat failed, retrying: %s", lease.tables.pipeline, err)


def guarded_tables(tables: Tables) -> list[str]:
    """The tables whose commits the lease of `tables` fences: the archive's record under the archive's own lease,
    the stream path's tables under the pipeline's."""
    if tables.lease_table == tables.archive_writer().lease_table:
        return [record_uri(tables.archive)]
    return [tables.path(name) for name in fencing.FENCED]


@contextmanager
def hold(tables: Tables, command: str, heartbeat_seconds: float | None = None) -> Iterator[Lease]:
    """Hold the pipeline for the block, renewed from a daemon thread; released on exit. The holder checks
    `lease.lost` (or `lease.check()`) and stops writing once it is set."""
    lease = acquire(tables, command)
    guarded = guarded_tables(tables)
    try:
        fencing.raise_fence(lease, guarded)  # from here no earlier holder commits to these tables
    except BaseException:
        lease.release()
        raise
    fencing.register(lease, guarded)
    stop = threading.Event()
    beats = threading.Thread(target=_keep_alive, name=f"lease-{tables.pipeline}", daemon=True,
                             args=(lease, heartbeat_seconds or lease.seconds / HEARTBEATS_PER_LEASE, stop))
    beats.start()
    try:
        yield lease
    finally:
        fencing.unregister(lease)
        stop.set()
        beats.join()
        try:
            lease.release()
        except Exception as err:  # it expires by itself
            log.warning("lease of pipeline %s: release failed, it expires in %.0fs: %s", tables.pipeline,
                        max(0.0, (lease.row.expires_at - utc_now()).total_seconds()), err)
