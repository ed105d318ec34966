"""What both phases share, with no Spark job and no Dagster: the pipeline language (language/), the control plane
(control/: the handoff log, lifecycle, lease, requests, view), what a stream leaves for others to read (stream/),
the I/O under io/, the one owner of table paths (tables), every setting (settings), errors and crash points."""
