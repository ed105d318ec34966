"""Mistakes a user can fix surface in Dagster as one-line failures, not tracebacks."""

from contextlib import contextmanager

import dagster as dg

from switchyard.state_handoff.errors import UserError


@contextmanager
def user_errors_as_failures():
    try:
        yield
    except UserError as err:
        raise dg.Failure(description=str(err), allow_retries=False) from None
