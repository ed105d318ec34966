"""The control plane: what every process that runs a pipeline reads and writes to agree on it, all in Delta tables
read and written through delta-rs (no JVM), so that it works across hosts and on object stores.

- handoff_log: the pipeline's log, one Delta commit per entry, checked against the lifecycle at its snapshot
- lifecycle: the statuses, which may follow which, and the phase a pipeline is in
- lease: who runs the pipeline now (one holder, fenced by epoch); processes: who a holder is
- requests: rebase, stop and start requests, written and read one way
- view: where a pipeline stands, read once per decision (the lease, then the log)
- kept_versions: the `state` versions a vacuum keeps while a handoff or a rebase may read them
"""
