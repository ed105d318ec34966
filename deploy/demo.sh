#!/usr/bin/env bash
# The demo: the smoke job against the local broker (replaced by the pipeline as it lands).
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/switchyard smoke --events 5000
