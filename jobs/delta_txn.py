"""Delta's idempotent writes for the stream's batches: (txnAppId, txnVersion = batch id), the app id naming the
checkpoint incarnation whose batch ids it counts. The batches write through delta-rs: a batch's rows are few,
and a Spark MERGE or append of them cost seconds of plans, jobs and JIT work on the cores the keyed path needs.
Bad records, whose values may be large, are the exception: Spark's executors write them (jobs/sinks.py's
`append_new`), once per record.
Each commit is fenced by the pipeline's lease (state_handoff/fencing.py)."""

from __future__ import annotations

from switchyard.state_handoff.io import fencing
from switchyard.state_handoff.stream.checkpoints import checkpoint_incarnation


def keys_equal(keys: tuple[str, ...], target: str = "t", source: str = "s") -> str:
    """A MERGE's predicate matching rows on every key column (a composite key has several)."""
    return " AND ".join(f'{target}."{k}" = {source}."{k}"' for k in keys)


def merge_once(table, source, predicate: str, app_id: str, version: int, updates: dict[str, str] | None = None,
               matched_when: str | None = None) -> bool:
    """A MERGE of a small Arrow table through delta-rs (no JVM: no Spark jobs, plans or generated code), once per
    (app_id, version): the same `txn` action Spark's idempotent writes record. `table` is a deltalake
    DeltaTable, brought up to date here; target rows are `t`, source rows `s`; `updates` (column -> SQL over
    `t` and `s`) for matched rows, every column from `s` when None; `matched_when`: a matched row is updated only
    when this SQL over `t` and `s` holds. False when already committed."""
    from deltalake import Transaction

    if committed(table, app_id, version):
        return False

    def merge(properties) -> None:
        merger = table.merge(source, predicate=predicate, source_alias="s", target_alias="t",
                             commit_properties=properties)
        merger = (merger.when_matched_update_all(predicate=matched_when) if updates is None else
                  merger.when_matched_update(updates, predicate=matched_when))
        merger.when_not_matched_insert_all().execute()

    fencing.commit(table, [Transaction(app_id, version)], merge)
    return True


def committed(table, app_id: str, version: int) -> bool:
    """Whether delta-rs's `table` (brought up to date here) holds (app_id, version) or a later version."""
    table.update_incremental()
    done = table.transaction_version(app_id)
    return done is not None and done >= version


def append_arrow_once(table, data, app_id: str, version: int) -> bool:
    """An append of a small Arrow table through delta-rs into an existing table (its partitioning kept), once per
    (app_id, version)."""
    from deltalake import Transaction, write_deltalake

    if committed(table, app_id, version):
        return False
    fencing.commit(table, [Transaction(app_id, version)],
                   lambda properties: write_deltalake(table, data, mode="append", commit_properties=properties))
    return True


def delete_once(table, predicate: str, app_id: str, version: int) -> bool:
    """A DELETE through delta-rs (a SQL predicate over the table's columns), once per (app_id, version)."""
    from deltalake import Transaction

    if committed(table, app_id, version):
        return False
    fencing.commit(table, [Transaction(app_id, version)],
                   lambda properties: table.delete(predicate, commit_properties=properties))
    return True


class TxnApp:
    """A query's Delta transaction app id: the handoff and the incarnation of the query's checkpoint (which
    Spark writes as the query starts, before its first batch), so a fresh checkpoint's batch ids can never
    be mistaken for an old one's. `missing` names the incarnation of a checkpoint that was never started
    (a rebase catching up a handoff whose stream never ran)."""

    def __init__(self, base: str, checkpoint: str, missing: str | None = None):
        self.base, self.checkpoint, self.missing, self.incarnation = base, checkpoint, missing, None

    def __str__(self) -> str:
        if self.incarnation is None:
            self.incarnation = checkpoint_incarnation(self.checkpoint) or self.missing
            if self.incarnation is None:
                raise RuntimeError(f"the stream checkpoint {self.checkpoint} has no metadata file")
        return f"{self.base}-{self.incarnation}"
