"""What a running stream leaves on disk for others: a single-writer lock and per-batch progress files."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from state_handoff.errors import UserError
from state_handoff.tables import Tables


def stream_dir(tables: Tables, handoff_id: str | None = None) -> Path:
    root = Path(tables.stream_dir)
    return root / handoff_id if handoff_id else root


class StreamLock:
    """An exclusive flock on `<pipeline>/_stream/lock`; the kernel drops it when the process dies, even by SIGKILL."""

    def __init__(self, tables: Tables):
        self.path = stream_dir(tables) / "lock"
        self._fh = None

    def acquire(self) -> "StreamLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            fh.close()
            raise UserError(f"a stream for this pipeline is already running ({holder}): stop it before starting another") from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"pid {os.getpid()}")
        fh.flush()
        self._fh = fh
        return self

    def release(self) -> None:
        if self._fh:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None


def stream_running(tables: Tables) -> bool:
    path = stream_dir(tables) / "lock"
    if not path.exists():
        return False
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
    return False


def write_json_atomically(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, path)


def read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None
