"""Fencing: once a pipeline's lease has a newer holder, a commit by an older one is refused inside the commit itself.

A lease only advises: a holder frozen by SIGSTOP or a paused VM still believes it holds the pipeline when it wakes,
and would write on. So each acquisition of a lease has an epoch (the lease table's version of the commit that took
it: a later acquisition always has a larger one), and before it yields the pipeline its holder commits that epoch
into every table it guards (the pipeline's lease: the tables the stream and the backfill write, FENCED; the
archive's lease: the archive's record): a Delta app transaction (`txn` action) under the id FENCE_ID, in a commit
that changes no data but writes the table's metadata again, unchanged. After that every commit the holder makes to
those tables carries the same transaction, at a version that encodes its epoch (`version`: epoch << 20, plus a
count of Spark's writes). A commit by an older epoch is refused twice over:
- before it is tried: through delta-rs, when the table's fence is newer than the writer's epoch, or the writer's own
  monotonic clock says its lease may have lapsed (Lease.check_fresh): LeaseLost; through Spark (`spark_options`),
  by Delta's idempotent writes, which skip a write whose app transaction version is not above the table's;
- inside the commit, when a newer fence lands after the writer read the table: the fence changed the metadata and
  set the same app id, which Delta's conflict check refuses (delta-rs raises CommitFailedError, Spark
  MetadataChangedException or ConcurrentTransactionException, and neither writes anything). The metadata is what
  stops delta-rs's compaction, whose commits keep no app transaction: one a frozen holder had checked and begun
  fails when it wakes. Through delta-rs the writer reads the table again, finds the newer fence, and stops with
  LeaseLost.
Two commits of one holder to one table may meet in the same way (the stream's queries are threads); they are tried
again on the newer snapshot, which their own app ids keep idempotent.

What this does not fence inside the commit: the query checkpoints (a woken stream may plan a batch there:
jobs/stream/supervisor.py runs it) and the keyed query's updates, sent by Spark's Kafka sink: they are the
checkpoint's batches, the same either driver would send (an update is a key's whole state with its version, and
the state MERGE only moves a key forward).
"""

from __future__ import annotations

import itertools
import threading
from typing import Any, Callable, Protocol, TypeVar

from deltalake import CommitProperties, Transaction
from deltalake.exceptions import CommitFailedError

from switchyard.state_handoff.io import storage

FENCE_ID = "switchyard-lease-epoch"
FENCED = ("handoffs", "stream_batches", "state", "windows", "window_state", "dead_letter", "late", "tiles", "backlog")
EPOCH_SHIFT = 20  # a fence's version: the epoch above, Spark's writes of the epoch counted below
ATTEMPTS = 20

T = TypeVar("T")


class Lease(Protocol):
    """What fencing asks of a held lease (state_handoff/control/lease.py's Lease)."""

    epoch: int
    tables: Any  # the Tables it holds
    row: Any  # its lease row: `command` names the holder

    def check_fresh(self) -> None: ...

    def lose(self, reason: str) -> Exception: ...


_held: dict[str, Lease] = {}  # by the identity (storage.identity) of each table it guards, the leases held here
_lock = threading.Lock()
_spark_writes = itertools.count(1)  # this process's fenced Spark writes: each above the one before


def fence_version(epoch: int) -> int:
    """The app transaction version of `epoch`'s fence."""
    return epoch << EPOCH_SHIFT


def fenced_epoch(version: int | None) -> int | None:
    """The epoch of a fence's app transaction version."""
    return None if version is None else version >> EPOCH_SHIFT


def register(lease: Lease, paths: list[str]) -> None:
    """From now on this process's commits to the tables at `paths` (those the lease guards) carry its epoch."""
    with _lock:
        for path in paths:
            _held[storage.identity(path)] = lease


def unregister(lease: Lease) -> None:
    with _lock:
        for path in [p for p, held in _held.items() if held is lease]:
            del _held[path]


def holder(table_uri: str) -> Lease | None:
    """The lease this process holds over the table at `table_uri`, if any: found by the table's identity, so a
    table named by delta-rs (symlinks resolved, percent-encoded) is the table its lease was registered under."""
    location = storage.identity(table_uri)
    with _lock:
        return _held.get(location)


def raise_fence(lease: Lease, paths: list[str]) -> None:
    """Commit the lease's epoch into each of the tables at `paths` that exists: from this commit on, no older holder
    commits there. LeaseLost when a newer holder's fence is already in."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    for path in paths:
        if not storage.exists(storage.join(path, "_delta_log")):
            continue
        try:
            table = DeltaTable(path, storage_options=storage.delta_options(path))
        except TableNotFoundError:
            continue

        def fence(properties: CommitProperties, table=table) -> None:
            # the metadata written again as it is: every transaction that read the table before conflicts with it
            table.alter.set_table_description(table.metadata().description or "", commit_properties=properties)

        if (table.transaction_version(FENCE_ID) or -1) < fence_version(lease.epoch):
            commit(table, [], fence, lease)


def properties(table, txns: list[Transaction], lease: Lease | None = None, **options) -> CommitProperties:
    """Commit properties with the app transactions `txns` (and delta-rs's `options`) and, when this process holds the
    table's pipeline, the fence at the holder's epoch, also named in the commit's info (FENCE_ID there: the audit
    trail of who committed, kept even by delta-rs's optimize, which drops app transactions). Checked against the
    deltalake DeltaTable `table`'s snapshot first: LeaseLost when a newer holder fenced it, or when the holder's own
    clock says its lease may have lapsed."""
    lease = lease or holder(table.table_uri)
    if lease is None:
        return CommitProperties(app_transactions=list(txns) or None, **options)
    _check(table, lease)
    return CommitProperties(app_transactions=[*txns, Transaction(FENCE_ID, fence_version(lease.epoch))],
                            custom_metadata={FENCE_ID: str(lease.epoch)}, **options)


def _check(table, lease: Lease) -> None:
    lease.check_fresh()
    fenced_at = fenced_epoch(table.transaction_version(FENCE_ID))
    if fenced_at is not None and fenced_at > lease.epoch:
        raise lease.lose(f"pipeline {lease.tables.pipeline}: `{lease.row.command}` (epoch {lease.epoch}) was fenced "
                         f"out of {table.table_uri} by a newer holder of the lease (epoch {fenced_at})")


def spark_options(path: str) -> dict[str, str]:
    """Options for Spark's Delta writer to the table at `path` that fence its commit when this process holds the
    table's pipeline: Delta's idempotent write (txnAppId, txnVersion) under FENCE_ID, at a version above every
    earlier one of this epoch and below every later epoch's fence. Checked first, as a delta-rs commit is (LeaseLost);
    a newer fence after that skips the write, or fails its commit when it lands during it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    lease = holder(path)
    if lease is None:
        return {}
    try:
        _check(DeltaTable(path, storage_options=storage.delta_options(path)), lease)
    except TableNotFoundError:
        lease.check_fresh()
    count = next(_spark_writes)
    if count >= 1 << EPOCH_SHIFT:
        raise RuntimeError("more fenced Spark writes in one process than a fence version can count")
    return {"txnAppId": FENCE_ID, "txnVersion": str(fence_version(lease.epoch) + count)}


def commit(table, txns: list[Transaction], write: Callable[[CommitProperties], T], lease: Lease | None = None) -> T:
    """`write(properties)`: one delta-rs commit to the deltalake DeltaTable `table` with the app transactions `txns`,
    fenced when this process holds the table's pipeline. A commit that meets another of the same epoch is tried again
    on the newer snapshot; one that meets a newer fence ends in LeaseLost."""
    lease = lease or holder(table.table_uri)
    for attempt in range(ATTEMPTS):
        try:
            return write(properties(table, txns, lease))
        except CommitFailedError:
            if lease is None or attempt == ATTEMPTS - 1:
                raise
            table.update_incremental()
    raise AssertionError("unreachable")
