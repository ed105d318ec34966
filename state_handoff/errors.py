"""Errors a user can cause and fix: reported in one line at the command-line edge, exit code 2."""


class UserError(Exception):
    """Bad usage, bad input or a bad environment; the message says what to fix."""

    exit_code = 2


class Failed(Exception):
    """A run failed for a reason outside the user's input (a query, the cluster): reported in one line, exit 1;
    the handoff log has FAILED with the reason."""

    exit_code = 1
