"""The `switchyard` command line: `main` parses, runs one command and turns a user's error into one line.

parser: the parser, its common options and the error edge. pipeline: the operator's commands (pipelines, archive,
backfill, handoff, stream, rebase, stop, status, config). Under `switchyard dev`: services (the local Kafka, Spark
and object store), inputs (the demo's generate and live) and developer (the smoke check of an installation).
"""

from switchyard.jobs.cli.parser import main

__all__ = ["main"]
