"""`switchyard backfill` (isBacklog = true): archive days to per-day tiles, tiles to keyed state and windows.

read: the archive's files checked and read, and a Kafka offset range read in batch; tiles: the tiles run and its
record; accounting: the identity read = well-formed + dead-lettered per partition; tail: the topic's records after
the archive, folded into the backlog; commit: the backfill's and a rebase's commit at its cut, over tiled (what a
commit reads once), writes (state, windows) and committed (the count and BACKFILL_COMMITTED); backlog: only the new
days merged into the last merge. A rebase's own steps live in jobs/rebase/.

The names below are the ones the rest of the project uses."""

from switchyard.jobs.backfill.accounting import dense_spans
from switchyard.jobs.backfill.commit import (AtCut, MergedAtCut, commit_at_cut, commit_backfill, merge_at_cut,
                                             run_backfill)
from switchyard.jobs.backfill.read import (kafka_range, newest_archived_event_time, read_archive,
                                           retained_or_archived_range, verify_archive)
from switchyard.jobs.backfill.tail import TAIL_PHASE
from switchyard.jobs.backfill.tiled import TiledBacklog, read_backlog
from switchyard.jobs.backfill.tiles import BackfillResult, KeptTiles, backfill_tiles, failure_logged

__all__ = ["AtCut", "BackfillResult", "KeptTiles", "MergedAtCut", "TAIL_PHASE", "TiledBacklog", "backfill_tiles",
           "commit_at_cut", "commit_backfill", "dense_spans", "failure_logged", "kafka_range", "merge_at_cut",
           "newest_archived_event_time", "read_archive", "read_backlog", "retained_or_archived_range", "run_backfill",
           "verify_archive"]
