"""The `switchyard` command line: `main` parses, runs one command and turns a user's error into one line.

parser: the parser, its common options and the error edge. services: the local Kafka, Spark and object store.
inputs: the demo's generate and live. pipeline: archive, backfill, handoff, stream, rebase, stop, status.
developer: checks of an installation (smoke).
"""

from jobs.cli.parser import main

__all__ = ["main"]
