"""The named crash points (`SWITCHYARD_FAULT`, state_handoff/faults.py): their names alone, which the settings
check a value against without importing what kills the process."""

POINTS = (
    "backfill.after_tiles",            # tiles and backfill dead letters written, state not yet
    "backfill.after_state",            # state tables written, BACKFILL_COMMITTED not yet
    "handoff.before_log",              # start offsets computed and checked, HANDOFF_COMMITTED not yet
    "stream.after_seed",               # the seed's files written, no query started
    "stream.keyed.after_send",         # a keyed batch's updates sent and the batch committed, `state` not merged
    "stream.events.after_dead_letter",  # an events batch's dead letters appended, nothing else of it
    "stream.events.after_window_merge",  # its window partials merged into window_state
    "stream.events.after_finalize_append",  # final windows appended to windows, not yet deleted from window_state
    "stream.events.after_progress",    # its progress row written, the batch not committed in the checkpoint
    "stream.state.after_merge",        # a state batch merged into state, the batch not committed
    "rebase.after_pause",              # the queries drained and stopped, PAUSED (the cut) logged
    "rebase.after_backfill",           # the recomputed state committed (BACKFILL_COMMITTED), no handoff yet
    "redeploy.after_tiles",            # at a redeploy's cut, its tiles in `tiles`, nothing else of the cut written
)
