#!/usr/bin/env bash
# Headless Chromium for the dashboard's browser tests: Debian's `chromium` package, driven by
# Playwright for Python with executable_path (never `playwright install`: it downloads).
#   scripts/chromium.sh install   install /usr/bin/chromium when missing (apt-get, needs root)
#   scripts/chromium.sh path      print the browser's path (exit 1 when missing)
set -euo pipefail
bin="${RUNFACTS_CHROMIUM:-/usr/bin/chromium}"

case "${1:-}" in
  install)
    if [ -x "$bin" ]; then
      echo "chromium: $bin present" >&2
      exit 0
    fi
    if [ "$(id -u)" != 0 ]; then
      echo "chromium: $bin missing; run as root (or: sudo apt-get install -y chromium)" >&2
      exit 1
    fi
    echo "chromium: installing Debian's chromium package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends chromium fonts-liberation >/dev/null
    "$bin" --version >&2
    ;;
  path)
    [ -x "$bin" ] && echo "$bin"
    ;;
  *)
    echo "usage: $0 install|path" >&2
    exit 2
    ;;
esac
