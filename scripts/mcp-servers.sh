#!/usr/bin/env bash
# Third-party MCP servers from PyPI that docs/mcp.md's examples and tests put behind runfacts,
# each in its own venv (its own `mcp` SDK version: a server built on the SDK's 1.x keeps it),
# as `uvx`/`pipx` would install them:
#   scripts/mcp-servers.sh install   .runfacts/mcp-servers/<name>/bin/<server> (idempotent)
#   scripts/mcp-servers.sh path      the directory to put on PATH
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
root="$repo/.runfacts/mcp-servers"
py="${PYTHON:-python3}"
# name  pip requirements (pinned: the examples are tested against these)
servers=(
  "sqlite|mcp-server-sqlite==2025.4.25 mcp==1.30.0"
)

case "${1:-}" in
  install)
    for entry in "${servers[@]}"; do
      name="${entry%%|*}"; reqs="${entry#*|}"
      venv="$root/$name"; stamp="$venv/.installed"
      if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$reqs" ]; then
        continue
      fi
      echo "mcp-servers: installing $reqs into $venv" >&2
      rm -rf "$venv"
      "$py" -m venv "$venv"
      # shellcheck disable=SC2086
      "$venv/bin/python" -m pip install -q $reqs
      echo "$reqs" > "$stamp"
    done
    ;;
  path)
    printf '%s\n' "$root/sqlite/bin"
    ;;
  *)
    echo "usage: scripts/mcp-servers.sh install|path" >&2
    exit 2
    ;;
esac
