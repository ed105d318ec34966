"""The command line's log: the `switchyard` logger hierarchy, its two line formats (text: the message alone, as the
commands have always printed it; json: one object per line) and the level -v and -q choose.

Only the CLI's `main` configures it, for the length of one command (`configured`): a program that imports switchyard
keeps its own logging, and sees switchyard's records under the `switchyard` logger like any library's.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

ROOT = "switchyard"
FORMATS = ("text", "json")

Out = Callable[[str], None]


class TextFormatter(logging.Formatter):
    """The message alone, a traceback under it when there is one: each line as the commands print it."""

    def __init__(self) -> None:
        super().__init__("%(message)s")


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts (ISO-8601, UTC), level, logger, message; pipeline and command when known (a
    record's own `pipeline`, given with `extra=`, over the command's); exc_info as text when there is one."""

    def __init__(self, command: str | None = None, pipeline: str | None = None) -> None:
        super().__init__()
        self.command, self.pipeline = command, pipeline

    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for field in ("pipeline", "command"):
            known = getattr(record, field, None) or getattr(self, field)
            if known:
                entry[field] = known
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exc_info"] = record.exc_text
        if record.stack_info:
            entry["stack_info"] = self.formatStack(record.stack_info)
        return json.dumps(entry, default=str)


class StdoutHandler(logging.Handler):
    """Each line to the `sys.stdout` of the moment it is written, flushed: a command run in a process that redirects
    its output (a test, a campaign) logs where the output goes then, and a reader of a pipe sees each line as it
    comes."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own rule: a line that cannot be written never fails the work
            self.handleError(record)


def level_of(verbose: bool, quiet: bool) -> int:
    """-v: DEBUG; -q: WARNING (warnings and errors only); neither: INFO."""
    return logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO


def formatter(log_format: str, command: str | None = None, pipeline: str | None = None) -> logging.Formatter:
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: one of {', '.join(FORMATS)}")
    return JsonFormatter(command, pipeline) if log_format == "json" else TextFormatter()


@contextmanager
def configured(level: int = logging.INFO, log_format: str = "text", command: str | None = None,
               pipeline: str | None = None) -> Iterator[logging.Logger]:
    """The `switchyard` logger writing its records of `level` and above to stdout in `log_format` while the block
    runs, and only to there (not on to the root logger's handlers); as it was before, after."""
    root = logging.getLogger(ROOT)
    handler = StdoutHandler()
    handler.setFormatter(formatter(log_format, command, pipeline))
    saved = root.level, root.propagate
    root.addHandler(handler)
    root.setLevel(level)
    root.propagate = False
    try:
        yield root
    finally:
        root.removeHandler(handler)
        root.setLevel(saved[0])
        root.propagate = saved[1]


def logger_of(out: Out) -> logging.Logger | None:
    """The logger whose `info` `out` is (a reporting function's default), else None (a caller's own collector)."""
    owner = getattr(out, "__self__", None)
    return owner if isinstance(owner, logging.Logger) and out == owner.info else None


def warnings_to(out: Out) -> Out:
    """Where a function that reports through `out` sends a warning: when `out` is a logger's `info` (the default),
    that logger's `warning`; else `out` itself, so a caller's collector (a test's list) gets every line."""
    owner = logger_of(out)
    return owner.warning if owner is not None else out
