"""Mistakes a user can fix, and failures switchyard names, surface in Dagster as one-line failures, not tracebacks."""

from contextlib import contextmanager

import dagster as dg

from switchyard.state_handoff.errors import Failed, UserError


@contextmanager
def user_errors_as_failures():
    try:
        yield
    except UserError as err:
        raise dg.Failure(description=str(err), allow_retries=False) from None
    except Failed as err:  # not the user's to fix: a retry may do
        raise dg.Failure(description=str(err)) from err
