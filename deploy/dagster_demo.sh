#!/usr/bin/env bash
# The chain through Dagster, recorded in the instance that `make ui` shows: backfill_then_stream over every
# archived day in one run (tiles, state and windows, the Great Expectations gates, the handoff), then the
# stream until it has caught up. Needs the broker up and the archive written; deploy/demo.sh does both first.
set -euo pipefail
cd "$(dirname "$0")/.."

export DAGSTER_HOME; DAGSTER_HOME=$(realpath -m "${DAGSTER_HOME:-.dagster_home}")
export SWITCHYARD_WAREHOUSE; SWITCHYARD_WAREHOUSE=$(realpath -m "${SWITCHYARD_WAREHOUSE:-warehouse}")
pipeline="${SWITCHYARD_PIPELINE:-demo}"
fail() { echo "switchyard demo: $*" >&2; exit 2; }

mkdir -p "$DAGSTER_HOME"
cp deploy/dagster.yaml "$DAGSTER_HOME/dagster.yaml"

days=$(ls "$SWITCHYARD_WAREHOUSE/$pipeline/archive" 2>/dev/null | sed -n 's/^event_date=//p' | sort)
[ -n "$days" ] || fail "no archived days under $SWITCHYARD_WAREHOUSE/$pipeline/archive: run switchyard archive first"
first=$(head -1 <<<"$days"); last=$(tail -1 <<<"$days")

# The daily partitions begin at the archive's first day (or SWITCHYARD_FIRST_DAY).
echo "switchyard demo: Dagster job backfill_then_stream over $first..$last (instance $DAGSTER_HOME)"
.venv/bin/python -m deploy.dagster_run --job backfill_then_stream --from "$first" --to "$last"
echo "switchyard demo: the run, its checks and the stream's observations are in $DAGSTER_HOME: make ui, then http://127.0.0.1:${DAGSTER_PORT:-3000}"
