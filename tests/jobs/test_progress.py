"""A long batch command shows its progress: tasks done of the total in Spark's running stages, and the time left."""

from __future__ import annotations

import time
from collections import namedtuple

from switchyard.jobs.progress import progress_line, report_progress

Stage = namedtuple("Stage", "stageId numTasks numCompletedTasks")


def test_the_time_left_is_the_pace_so_far():
    line = progress_line("backfill", [Stage(3, 10, 4)], {3: 100.0}, now=108.0)  # 4 tasks in 8 s: 6 more, 12 s
    assert line == "backfill: 4 of 10 tasks done in 1 running Spark stage(s), about 12s left in this stage"
    assert progress_line("backfill", [Stage(3, 2000, 0)], {3: 100.0}, now=100.0) == \
        "backfill: 0 of 2,000 tasks done in 1 running Spark stage(s)"
    assert progress_line("backfill", [], {}, now=0.0) is None


def test_progress_is_printed_while_spark_works(spark):
    lines: list[str] = []
    stop = report_progress(spark, lines.append, "test", every=0.3)
    try:
        spark.sparkContext.parallelize(range(6), 6).map(lambda x: (time.sleep(1.5), x)[1]).count()
    finally:
        stop.set()
    assert any(" of 6 tasks done in 1 running Spark stage(s)" in line for line in lines), lines
    assert any("left in this stage" in line for line in lines), lines


def test_a_command_run_in_a_longer_lived_process_leaves_no_reporter_running(spark, tmp_path):
    """`switchyard status` through the command line's entry point in this process: every reporter started while
    it ran is stopped when it returns (a campaign history runs many commands in one process)."""
    import threading

    from switchyard.jobs.cli.parser import main

    report_progress(spark, lambda _: None, "earlier", every=0.1)
    assert any(t.name == "progress-earlier" for t in threading.enumerate())
    main(["status", "--pipeline", "demo", "--warehouse", str(tmp_path)])  # refused: nothing in the warehouse
    deadline = time.monotonic() + 5
    while any(t.name.startswith("progress-") for t in threading.enumerate()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(t.name.startswith("progress-") for t in threading.enumerate())
