#!/usr/bin/env bash
# The demo, end to end through Dagster: a fresh demo warehouse, events on the local broker (generated once),
# 80% archived, then the chain backfill -> checks -> handoff -> stream until caught up as a Dagster run.
set -euo pipefail
cd "$(dirname "$0")/.."

export SWITCHYARD_WAREHOUSE; SWITCHYARD_WAREHOUSE=$(realpath -m "${SWITCHYARD_WAREHOUSE:-warehouse}")
sy=.venv/bin/switchyard
topic=demo.events
started=$(date +%s)

rm -rf "$SWITCHYARD_WAREHOUSE/demo"  # each demo starts from the same topic and an empty warehouse
if ! .venv/bin/python -c "from state_handoff.kafka_io import partitions_of as p; p('${SWITCHYARD_BOOTSTRAP:-127.0.0.1:9092}', '$topic')" \
     >/dev/null 2>&1; then
  $sy generate --topic "$topic" --events 20000 --keys 500 --partitions 4 --days 3 --seed 7 --malformed-rate 0.01
fi
$sy archive --pipeline demo --topic "$topic" --fraction 0.8
deploy/dagster_demo.sh
echo
$sy status --pipeline demo
echo
echo "switchyard demo: done in $(( $(date +%s) - started ))s. To look at it in Dagster: make ui, then open http://127.0.0.1:${DAGSTER_PORT:-3000}"
