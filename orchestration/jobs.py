"""Jobs over the asset graph: the whole chain, and the backfill of days alone (what the schedule runs)."""

import dagster as dg

from orchestration.partitions import daily

BACKFILL = ["archive", "tiles", "state", "windows", "window_state"]

backfill_then_stream = dg.define_asset_job(
    "backfill_then_stream",
    selection=dg.AssetSelection.assets(*BACKFILL, "handoff", "stream"),
    partitions_def=daily,
    description="Observe the archive, backfill the chosen days, commit the state, hand off and stream.",
)

backfill_days = dg.define_asset_job(
    "backfill_days",
    selection=dg.AssetSelection.assets(*BACKFILL),
    partitions_def=daily,
    description="Observe the archive, backfill the chosen days into tiles and commit the keyed state and windows.",
)

defs = dg.Definitions(jobs=[backfill_then_stream, backfill_days])
