# runfacts — the two quick-start commands and the developer targets.
#   make demo    set up, start Kafka, run the main job end to end
#   make test    set up, start Kafka and PostgreSQL, run the whole test suite
# setup: venv + Kafka jars; setup-all: also PostgreSQL and Chromium (for the tests)
.PHONY: setup setup-all demo test unit lint crash bench kafka-start kafka-stop clean

PY := .venv/bin/python
TEST_CMD := $(PY) -m pytest -q

setup:
	scripts/setup.sh

setup-all:
	scripts/setup.sh --all

demo: setup
	scripts/kafka.sh start
	.venv/bin/runfacts demo

test: setup-all
	scripts/kafka.sh start
	scripts/postgres.sh start
	.venv/bin/runfacts schemas check --golden tests/contract/golden
	$(TEST_CMD)

unit: setup
	$(PY) -m pytest -q tests/unit tests/contract

lint: setup
	.venv/bin/ruff check .

kafka-start:
	scripts/kafka.sh start

kafka-stop:
	scripts/kafka.sh stop

clean:
	scripts/kafka.sh stop || true
	rm -rf .runfacts .venv
