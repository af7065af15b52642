#!/usr/bin/env bash
# mypy over the installed import layout: setuptools maps schemas/ -> runfacts.schemas (and
# processors, projections, connectors), which mypy cannot follow from the folders, so a
# symlink tree under .runfacts/typecheck rebuilds runfacts/ with those folders inside it.
# Paths in mypy's output are rewritten back to the real files; exits with mypy's status.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TREE="$ROOT/.runfacts/typecheck"
rm -rf "$TREE/runfacts"
mkdir -p "$TREE/runfacts"
ln -s "$ROOT"/runfacts/*.py "$ROOT/runfacts/py.typed" "$TREE/runfacts/"
for sub in "$ROOT"/runfacts/*/; do  # subpackages of runfacts itself (runfacts/tools, ...)
  name="$(basename "$sub")"
  [ "$name" = "__pycache__" ] || ln -s "${sub%/}" "$TREE/runfacts/$name"
done
for pkg in schemas processors projections connectors; do
  ln -s "$ROOT/$pkg" "$TREE/runfacts/$pkg"
done
cd "$TREE"
"$ROOT/.venv/bin/mypy" --config-file "$ROOT/pyproject.toml" -p runfacts "$@" \
  | sed -E 's#^runfacts/(schemas|processors|projections|connectors)/#\1/#'
