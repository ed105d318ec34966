"""`switchyard COMMAND` through the command line's own entry point, in the test's process and session: its exit code
and what it printed, without a JVM start of its own. A command a crash point kills runs in a process of its own."""

from __future__ import annotations

import contextlib
import io

from switchyard.state_handoff.tables import Tables


def cli_here(tables: Tables, bootstrap: str, *args: str) -> tuple[int, str]:
    """Exit code and output (stdout and stderr as they interleave) of `switchyard ARGS` for the tables' pipeline."""
    from switchyard.jobs.cli.parser import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main([*args, "--pipeline", tables.pipeline, "--warehouse", tables.warehouse, "--bootstrap", bootstrap])
    return code, out.getvalue()
