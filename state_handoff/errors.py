"""The failures a command reports in one line at the command-line edge, each with the exit code that says what to
do about it, classified once where they happen (as Kafka Streams answers a thread's failure with an enum):

- UserError, exit 2 (REFUSED): bad usage, bad input or a state an operator must act on; the message says what;
- NotNow, exit 75 (NOT_NOW, sysexits' EX_TEMPFAIL): something the command needs is unavailable for the moment
  (Kafka, the schema registry, the pipeline's lease): retry. `switchyard serve` retries it with its backoff and never
  holds a stream down on it;
- Failed, exit 1: a run that failed for a reason outside the user's input (a query, the cluster)."""

REFUSED = 2
NOT_NOW = 75


class UserError(Exception):
    """Bad usage, bad input or a bad environment; the message says what to fix."""

    exit_code = REFUSED


class NotNow(UserError):
    """Unavailable for the moment: the same one-line report as a UserError (a caller that catches UserError still
    reports it), another exit code."""

    exit_code = NOT_NOW


class Failed(Exception):
    """A run failed for a reason outside the user's input (a query, the cluster): reported in one line, exit 1;
    the handoff log has FAILED with the reason."""

    exit_code = 1
