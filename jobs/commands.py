"""Pipeline subcommands of the command line (generate, archive, backfill, handoff, stream, status)."""

from __future__ import annotations


def add_pipeline_commands(commands, common) -> None:
    """Registered as each phase lands."""
