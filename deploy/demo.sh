#!/usr/bin/env bash
# `make demo` (and `make demo-live`, `make stop`): the life of a pipeline through Dagster; see deploy/demo.py.
set -euo pipefail
cd "$(dirname "$0")/.."
export SWITCHYARD_WAREHOUSE; SWITCHYARD_WAREHOUSE=$(realpath -m "${SWITCHYARD_WAREHOUSE:-warehouse}")
exec .venv/bin/python -m switchyard.deploy.demo "$@"
