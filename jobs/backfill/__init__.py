"""`switchyard backfill` (isBacklog = true): archive days to per-day tiles, tiles to keyed state and windows.

read: the archive's files checked and read, and a Kafka offset range read in batch; tiles: the tiles run and its
record; accounting: the identity read = well-formed + dead-lettered per partition; tail: the topic's records
after the archive folded into the backlog; commit: state, windows, seed and BACKFILL_COMMITTED; reconciliation:
the recomputed state against the streamed one at a rebase's cut."""

from jobs.backfill.accounting import archive_accounting, dense_spans
from jobs.backfill.commit import AtCut, commit_state, prepare_stream, run_backfill
from jobs.backfill.read import (archived_boundary, check_files, kafka_range, newest_archived_event_time, read_archive,
                                skipped_gaps)
from jobs.backfill.reconciliation import reconcile
from jobs.backfill.tail import TAIL_PHASE, KafkaTail, kafka_tail_to_latest
from jobs.backfill.tiles import BackfillResult, backfill_tiles, pending_tiles_run

__all__ = ["AtCut", "BackfillResult", "KafkaTail", "TAIL_PHASE", "archive_accounting", "archived_boundary",
           "backfill_tiles", "check_files", "commit_state", "dense_spans", "kafka_range", "kafka_tail_to_latest",
           "newest_archived_event_time", "pending_tiles_run", "prepare_stream", "read_archive", "reconcile",
           "run_backfill", "skipped_gaps"]
