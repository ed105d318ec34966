# The two commands of the quick start: `make demo` and `make test`. Each sets up what it needs.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
KAFKA_PORT ?= 9092
export SWITCHYARD_BOOTSTRAP ?= 127.0.0.1:$(KAFKA_PORT)

.PHONY: setup demo demo-live stop test test-extended ui kafka-start kafka-stop clean

setup:
	@deploy/setup.sh

kafka-start: setup
	@$(BIN)/switchyard dev kafka start --port $(KAFKA_PORT)

kafka-stop:
	@$(BIN)/switchyard dev kafka stop --port $(KAFKA_PORT)

# The life of a pipeline in a few minutes: backfill, switch, live, a scheduled backfill that rebases it, stop.
demo: kafka-start
	@deploy/demo.sh

# The same, leaving the stream and its producer live for `make ui`; `make stop` stops them.
demo-live: kafka-start
	@deploy/demo.sh --live

stop:
	@deploy/demo.sh --stop

test: setup
	@deploy/run_tests.sh -m "not extended" -n 2 --dist loadfile --no-loadscope-reorder --durations=40

# The slower end-to-end proofs whose parts `make test` runs: the whole switch on a Spark cluster, three brokers and
# the object store (test_scale_out), the backlog on the cluster, the switch on the store.
test-extended: setup
	@deploy/run_tests.sh -m extended --durations=40

# The Dagster UI on http://127.0.0.1:3000 (DAGSTER_PORT to change), with the daemon for schedules and sensors.
ui: setup
	@deploy/dagster_ui.sh

clean: kafka-stop
	rm -rf warehouse .switchyard/kafka
