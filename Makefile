# runfacts — the two quick-start commands and the developer targets.
#   make demo    set up, start Kafka, run the main job end to end
#   make test    set up, start Kafka and PostgreSQL, lint (ruff, mypy), run the test suite (without slow tests)
#   make ts-test the TypeScript client's tests (npm ci, build, node --test) against a real gateway and MCP server
#   make crash   the full crash matrix (table) and the decider fuzz with 10^5 cases
# setup: venv + Kafka jars; setup-all: also PostgreSQL and Chromium (for the tests)
.PHONY: setup setup-all demo test ts-test unit lint crash fuzz bench kafka-start kafka-stop clean

PY := .venv/bin/python
TEST_CMD := $(PY) -m pytest -q --durations=25
# mypy over the code packages as installed (runfacts.schemas, runfacts.processors, ...): a symlink
# tree lets it follow imports across them (tests/ and benchmarks/ are not type-checked).
TYPECHECK := scripts/typecheck.sh

setup:
	scripts/setup.sh

setup-all:
	scripts/setup.sh --all

demo: setup
	scripts/kafka.sh start
	.venv/bin/runfacts demo

test: setup-all
	.venv/bin/ruff check .
	$(TYPECHECK)
	scripts/kafka.sh start
	scripts/postgres.sh start
	.venv/bin/runfacts schemas check --golden tests/contract/golden
	$(TEST_CMD)
	$(MAKE) ts-test

# clients/typescript against the real stack (its tests start `runfacts gateway serve` and
# `runfacts mcp serve` from .venv on the broker): npm ci (when the lock file changed), build, node --test
ts-test: setup
	scripts/kafka.sh start
	scripts/node-deps.sh
	cd clients/typescript && npm run build && npm test

unit: setup
	$(PY) -m pytest -q tests/unit tests/contract

crash: setup
	scripts/kafka.sh start
	.venv/bin/runfacts dev crash --fuzz-scale 10

fuzz: setup
	RUNFACTS_FUZZ_SCALE=10 $(PY) -m pytest -q tests/unit/decider/test_fuzz.py

lint: setup
	.venv/bin/ruff check .
	$(TYPECHECK)

kafka-start:
	scripts/kafka.sh start

kafka-stop:
	scripts/kafka.sh stop

clean:
	scripts/kafka.sh stop || true
	rm -rf .runfacts .venv
