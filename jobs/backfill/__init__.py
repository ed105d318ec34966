"""`switchyard backfill` (isBacklog = true): archive days to per-day tiles, tiles to keyed state and windows.

read: the archive's files checked and read, and a Kafka offset range read in batch; tiles: the tiles run and its
record; accounting: the identity read = well-formed + dead-lettered per partition; tail: the topic's records after
the archive, folded into the backlog; commit: state, windows, the stream's seed and BACKFILL_COMMITTED; backlog:
only the new days merged into the last merge. A rebase's own steps live in jobs/rebase/.

The names below are the ones the rest of the project uses."""

from switchyard.jobs.backfill.accounting import dense_spans
from switchyard.jobs.backfill.commit import AtCut, commit_state, run_backfill
from switchyard.jobs.backfill.read import (kafka_range, newest_archived_event_time, read_archive,
                                           retained_or_archived_range, verify_archive)
from switchyard.jobs.backfill.tail import TAIL_PHASE
from switchyard.jobs.backfill.tiles import BackfillResult, KeptTiles, backfill_tiles

__all__ = ["AtCut", "BackfillResult", "KeptTiles", "TAIL_PHASE", "backfill_tiles", "commit_state", "dense_spans",
           "kafka_range", "newest_archived_event_time", "read_archive", "retained_or_archived_range", "run_backfill",
           "verify_archive"]
