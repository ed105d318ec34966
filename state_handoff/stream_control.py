"""Where the stream keeps its checkpoints, and the progress caches beside them that `status` reads."""

from __future__ import annotations

import json
import os
from pathlib import Path

from state_handoff.tables import Tables


def stream_dir(tables: Tables, handoff_id: str | None = None) -> Path:
    root = Path(tables.stream_dir)
    return root / handoff_id if handoff_id else root


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
