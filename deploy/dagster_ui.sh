#!/usr/bin/env bash
# `make ui`: the Dagster webserver on 127.0.0.1 and the daemon (schedules, sensors, queued runs) against one
# instance ($DAGSTER_HOME, default ./.dagster_home) and the same warehouse and broker as the command line.
# Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

export DAGSTER_HOME; DAGSTER_HOME=$(realpath -m "${DAGSTER_HOME:-.dagster_home}")
# Runs execute in processes of their own: give them an absolute warehouse.
export SWITCHYARD_WAREHOUSE; SWITCHYARD_WAREHOUSE=$(realpath -m "${SWITCHYARD_WAREHOUSE:-warehouse}")
PORT="${DAGSTER_PORT:-3000}"

# the instance's storage made by one process before the two that share it start (deploy/dagster_home.py)
.venv/bin/python -m switchyard.deploy.dagster_home "$DAGSTER_HOME"

.venv/bin/dagster-daemon run -w workspace.yaml &
daemon=$!
trap 'kill "$daemon" 2>/dev/null || true; wait "$daemon" 2>/dev/null || true' EXIT
echo "switchyard ui: http://127.0.0.1:$PORT (instance $DAGSTER_HOME, warehouse $SWITCHYARD_WAREHOUSE)"
.venv/bin/dagster-webserver -h 127.0.0.1 -p "$PORT" -w workspace.yaml
