"""The switch and what both phases share: the pipeline spec, the handoff log and its lifecycle, the lease, status,
the only owners of paths, and the I/O under io/. Nothing here imports Dagster, Spark jobs or deploy/."""
