#!/usr/bin/env bash
# The TypeScript client's dev dependencies (clients/typescript: `npm ci` from the committed
# package-lock.json), installed when missing or older than the lock file. Needs Node 20+ and npm.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../clients/typescript"
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "node-deps: Node.js 20+ and npm are needed for clients/typescript (e.g. apt-get install nodejs npm)" >&2
  exit 1
fi
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 20 ]; then
  echo "node-deps: Node.js $(node --version) is too old for clients/typescript: install Node 20 or newer" >&2
  exit 1
fi
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "node-deps: npm ci in clients/typescript" >&2
  npm ci --no-audit --no-fund --loglevel=error
fi
