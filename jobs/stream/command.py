"""The command line of a `switchyard stream` process, for every launcher of one (`switchyard serve`, Dagster's
launch): the pipeline by the reference it was found by, so a `module:NAME` reaches the child as it reached the
launcher. A command line is what `ps` shows anyone on the host: secrets travel in the environment, never here."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from urllib.parse import urlsplit

from switchyard.state_handoff.errors import UserError


def stream_command(pipeline_ref: str, warehouse: str, bootstrap: str, *, log_format: str | None = None,
                   extra_args: Sequence[str] = ()) -> list[str]:
    """`switchyard stream` for the pipeline `pipeline_ref` (a registered name or `module:NAME`, passed as given),
    then `extra_args`. A local warehouse goes as an absolute path; one whose URI holds credentials is refused."""
    if "://" in warehouse:
        _refuse_credentials(warehouse)
    else:
        warehouse = os.path.abspath(warehouse)
    logging = ["--log-format", log_format] if log_format is not None else []
    return [sys.executable, "-m", "switchyard.jobs.cli", *logging, "stream", "--pipeline", pipeline_ref,
            "--warehouse", warehouse, "--bootstrap", bootstrap, *extra_args]


def _refuse_credentials(warehouse: str) -> None:
    parts = urlsplit(warehouse)
    if parts.username is not None or parts.password is not None:
        raise UserError(f"--warehouse {parts.scheme}://{parts.hostname}{parts.path} holds credentials in its URI, "
                        "which every process's command line would show: give them in AWS_ACCESS_KEY_ID and "
                        "AWS_SECRET_ACCESS_KEY instead")
