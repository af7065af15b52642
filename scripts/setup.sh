#!/usr/bin/env bash
# Idempotent set-up of a fresh checkout: Python venv with runfacts and its dev tools,
# the Kafka broker jars (Maven Central), the TypeScript client's npm dev dependencies when Node.js
# is installed, and, when asked, PostgreSQL.
#   scripts/setup.sh            venv + Kafka jars
#   scripts/setup.sh --all      also PostgreSQL (outbox tests), Kafka Connect with Debezium (outbox CDC
#                               tests), Chromium (dashboard browser test) and the PyPI MCP servers
#                               docs/mcp.md wraps (scripts/mcp-servers.sh)
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
py="${PYTHON:-python3}"

"$py" -c 'import sys; assert sys.version_info >= (3, 11), "runfacts needs Python >= 3.11"'
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv" >&2
  "$py" -m venv .venv
fi
stamp=.venv/.runfacts-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "setup: installing runfacts[dev] into .venv" >&2
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
scripts/kafka.sh fetch
if command -v node >/dev/null && command -v npm >/dev/null; then
  scripts/node-deps.sh   # clients/typescript: npm ci from its package-lock.json (make ts-test)
else
  echo "setup: no Node.js: clients/typescript's tests (make ts-test) need Node 20+ and npm" >&2
fi
if [ "${1:-}" = "--all" ]; then
  scripts/postgres.sh install
  scripts/kafka-connect.sh fetch   # Connect + Debezium jars (Maven Central) for the outbox CDC tests
  scripts/chromium.sh install   # the dashboard's browser test drives Debian's chromium
  scripts/mcp-servers.sh install   # a PyPI MCP server behind runfacts (docs/mcp.md's example, its test)
fi
echo "setup: done" >&2
