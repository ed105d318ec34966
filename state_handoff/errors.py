"""Errors a user can cause and fix: reported in one line at the command-line edge, exit code 2."""


class UserError(Exception):
    """Bad usage, bad input or a bad environment; the message says what to fix."""

    exit_code = 2
