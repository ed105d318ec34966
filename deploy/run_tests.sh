#!/usr/bin/env bash
# Runs the suite; the tests start (and stop) their own broker on a test port. No tests ran = failure.
set -uo pipefail
cd "$(dirname "$0")/.."
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "make test: pytest collected no tests; that is a failure" >&2
  exit 1
fi
exit "$rc"
