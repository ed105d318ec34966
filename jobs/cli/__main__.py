"""`python -m switchyard.jobs.cli`: the `switchyard` command, for callers that start it with this interpreter."""

import sys

from switchyard.jobs.cli.parser import main

sys.exit(main())
