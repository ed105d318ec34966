"""Where a command's JVM runs: found among the command's descendants while it runs, its niceness, session and
autogroup nice value read from /proc (jobs/cli/priority.py)."""

from __future__ import annotations

import os
import threading
import time

from switchyard.state_handoff.control.processes import descendants


class JvmPriority(threading.Thread):
    """Watches `root`'s process tree until a `java` process appears in it (or `root` ends), then reads it."""

    def __init__(self, root: int, timeout: float = 300):
        super().__init__(daemon=True)
        self.root, self.timeout = root, timeout
        self.pid = self.nice = self.session = self.autogroup = None
        self.start()

    def run(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline and os.path.exists(f"/proc/{self.root}"):
            for pid in descendants(self.root):
                try:
                    with open(f"/proc/{pid}/comm") as fh:
                        if fh.read().strip() != "java":
                            continue
                    with open(f"/proc/{pid}/stat") as fh:
                        fields = fh.read().rsplit(")", 1)[1].split()
                    autogroup = None
                    if os.path.exists(f"/proc/{pid}/autogroup"):
                        with open(f"/proc/{pid}/autogroup") as fh:
                            autogroup = int(fh.read().split()[-1])
                except (OSError, ValueError):
                    continue
                # stat after the command's name: state ppid pgrp session ... nice is the 19th field overall
                self.pid, self.session, self.nice, self.autogroup = pid, int(fields[3]), int(fields[16]), autogroup
                return
            time.sleep(0.2)

    def where(self) -> dict:
        return {"pid": self.pid, "nice": self.nice, "session": self.session, "autogroup": self.autogroup}

    def seen(self) -> bool:
        self.join(timeout=10)
        return self.pid is not None
