"""Tests of jobs: archive, backfill, stream, rebase, crash points, inputs and the command line."""
