"""A command run through jobs/cli/priority.py's `yield_cores` at niceness 10: it prints where its work ran (pid,
session, niceness, autogroup nice) as one JSON line, then exits 3 (`exit`), kills itself (`kill`) or waits to be
signalled (`wait`)."""

import json
import os
import signal
import sys
import time

from switchyard.jobs.cli.priority import autogroup_nice, yield_cores

mode = sys.argv[1]
code = yield_cores(10, [sys.executable, __file__, mode])
if code is not None:  # the process that waited for the work
    sys.exit(code)
print(json.dumps({"pid": os.getpid(), "sid": os.getsid(0), "nice": os.nice(0), "autogroup": autogroup_nice()}),
      flush=True)
if mode == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "wait":
    time.sleep(120)
sys.exit(3)
