"""Progress of a long batch command (archive, backfill, an offline rebase): every few seconds, the tasks Spark has
done of those its running stages hold, and the time left at the pace so far."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

EVERY_SECONDS = 10.0


def _duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    return f"{seconds // 60}m {seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def progress_line(what: str, stages: list, first_seen: dict[int, float], now: float) -> str | None:
    """One line for the running `stages` (Spark StageInfo), None when none runs. The time left is each stage's
    tasks still to do at the pace of its tasks done since it was first seen (at `first_seen[stage id]`)."""
    if not stages:
        return None
    done = sum(s.numCompletedTasks for s in stages)
    total = sum(s.numTasks for s in stages)
    left = []
    for stage in stages:
        elapsed = now - first_seen.get(stage.stageId, now)
        if stage.numCompletedTasks and elapsed > 0:
            left.append((stage.numTasks - stage.numCompletedTasks) * elapsed / stage.numCompletedTasks)
    eta = f", about {_duration(max(left))} left in {'this stage' if len(stages) == 1 else 'these stages'}" \
        if left else ""
    return f"{what}: {done:,} of {total:,} tasks done in {len(stages)} running Spark stage(s){eta}"


_reporting: list[threading.Event] = []  # the reporters running in this process


def stop_reporting() -> None:
    """Stop every reporter this process started: a command that ran in a longer-lived process (a test, a
    notebook) leaves none behind."""
    while _reporting:
        _reporting.pop().set()


def report_progress(spark, out: Callable[[str], None], what: str, every: float = EVERY_SECONDS) -> threading.Event:
    """Report progress lines through `out` (the command line's: its log) from a daemon thread until the returned
    event is set, `stop_reporting` runs, or the process ends. A Spark Connect session has no SparkContext in this
    process to ask: none are reported (the server's UI shows its stages)."""
    from switchyard.deploy.spark import is_connect

    stop = threading.Event()
    if is_connect(spark):
        return stop
    tracker = spark.sparkContext.statusTracker()
    _reporting.append(stop)
    first_seen: dict[int, float] = {}

    def watch() -> None:
        while not stop.wait(every):
            try:
                stages = [info for info in (tracker.getStageInfo(i) for i in tracker.getActiveStageIds()) if info]
            except Exception:  # noqa: BLE001 - the session stopping under it: progress is only ever a courtesy
                continue
            now = time.monotonic()
            for stage in stages:
                first_seen.setdefault(stage.stageId, now)
            line = progress_line(what, stages, first_seen, now)
            if line:
                out(line)

    threading.Thread(target=watch, name=f"progress-{what}", daemon=True).start()
    return stop
