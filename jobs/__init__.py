"""Spark entry points and DataFrame transforms: archive, backfill, handoff's stream, rebase, the command line."""
