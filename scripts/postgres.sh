#!/usr/bin/env bash
# A local PostgreSQL server for the outbox connector's tests and benchmark. No Docker needed.
#
#   scripts/postgres.sh start     install PostgreSQL if missing (root only), initdb once, start,
#                                 create role and database `runfacts` (idempotent)
#   scripts/postgres.sh install   install Debian's postgresql package when missing (root only)
#   scripts/postgres.sh stop      stop the server started by start (pg_ctl, fast mode)
#   scripts/postgres.sh status    print running/stopped and the dsn
#   scripts/postgres.sh logs      tail the server log
#   scripts/postgres.sh dsn       print the dsn
#
# Settings (environment): RUNFACTS_HOME (default <repo>/.runfacts), RUNFACTS_PG_PORT (55432),
# RUNFACTS_PG_DIR (state directory, default $RUNFACTS_HOME/postgres: a second server on another
# port needs its own), RUNFACTS_PG_BIN (default: newest /usr/lib/postgresql/*/bin),
# RUNFACTS_PG_START_TIMEOUT (60 s).
# The server listens on 127.0.0.1 only, with trust auth on loopback. initdb refuses to run as
# root, so as root the server runs as the `postgres` system user.
# Change data capture (Debezium, scripts/kafka-connect.sh): the server runs with
# wal_level=logical, and the role `runfacts` has REPLICATION. `start` on a server that runs with
# another wal_level sets it (ALTER SYSTEM) and restarts that server once (wal_level needs a
# restart); a server already logical is left running.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
home="${RUNFACTS_HOME:-$repo/.runfacts}"
pdir="${RUNFACTS_PG_DIR:-$home/postgres}"
# As root the server runs as `postgres`, which must be able to reach its data directory; a
# checkout under a private directory (e.g. /root) gets its state under /var/tmp instead.
if [ -z "${RUNFACTS_PG_DIR:-}" ] && [ "$(id -u)" = 0 ] && id postgres >/dev/null 2>&1 \
   && ! runuser -u postgres -- test -x "$(dirname "$home")" 2>/dev/null; then
  pdir="/var/tmp/runfacts-postgres-${RUNFACTS_PG_PORT:-55432}"
fi
data="$pdir/data"
log="$pdir/server.log"
sock="$pdir/socket"
port="${RUNFACTS_PG_PORT:-55432}"
timeout_s="${RUNFACTS_PG_START_TIMEOUT:-60}"
dsn="postgresql://runfacts@127.0.0.1:$port/runfacts"

say() { printf 'postgres: %s\n' "$*" >&2; }

find_bin() {
  if [ -n "${RUNFACTS_PG_BIN:-}" ]; then echo "$RUNFACTS_PG_BIN"; return 0; fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1 || true)"
  [ -n "$d" ] && echo "$d"
}

install_if_missing() {
  if [ -n "$(find_bin)" ] && [ -x "$(find_bin)/initdb" ]; then return 0; fi
  if [ "$(id -u)" != 0 ]; then
    say "PostgreSQL binaries not found and not root: install the postgresql package"; exit 1
  fi
  say "installing PostgreSQL (apt-get install -y postgresql)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
  # the Debian package starts its own cluster on 5432; ours is separate and needs none of it
  command -v pg_ctlcluster >/dev/null && pg_ctlcluster --force "$(basename "$(dirname "$(find_bin)")")" main stop 2>/dev/null || true
}

# run a command as the server's user: `postgres` when we are root, ourselves otherwise
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

running() {
  [ -f "$data/PG_VERSION" ] && as_owner "$(find_bin)/pg_ctl" -D "$data" status >/dev/null 2>&1
}

port_busy() {
  (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null
}

init_cluster() {
  mkdir -p "$pdir" "$sock"
  if [ "$(id -u)" = 0 ]; then chown postgres: "$pdir" "$sock"; fi
  if [ -f "$data/PG_VERSION" ]; then return 0; fi
  say "initdb in $data"
  as_owner "$(find_bin)/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
    >"$pdir/initdb.log" 2>&1 || { say "initdb failed:"; cat "$pdir/initdb.log" >&2; exit 1; }
  {
    echo "# written by scripts/postgres.sh"
    echo "listen_addresses = '127.0.0.1'"
    echo "port = $port"
    echo "unix_socket_directories = '$sock'"
    echo "max_connections = 200"
    echo "shared_buffers = 128MB"
    echo "wal_level = logical"
    echo "max_replication_slots = 20"
    echo "max_wal_senders = 20"
  } >> "$data/postgresql.conf"
}

psql_admin() {
  as_owner "$(find_bin)/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAX "$@"
}

create_role_and_db() {
  local psql=("$(find_bin)/psql" -h 127.0.0.1 -p "$port" -U postgres -d postgres -qtAX)
  if [ -z "$(as_owner "${psql[@]}" -c "SELECT 1 FROM pg_roles WHERE rolname='runfacts'")" ]; then
    as_owner "${psql[@]}" -c "CREATE ROLE runfacts LOGIN CREATEDB REPLICATION" >/dev/null
  fi
  # Debezium streams the WAL over a replication connection as runfacts (older clusters lack it)
  if [ "$(as_owner "${psql[@]}" -c "SELECT rolreplication FROM pg_roles WHERE rolname='runfacts'")" != t ]; then
    as_owner "${psql[@]}" -c "ALTER ROLE runfacts REPLICATION" >/dev/null
  fi
  if [ -z "$(as_owner "${psql[@]}" -c "SELECT 1 FROM pg_database WHERE datname='runfacts'")" ]; then
    as_owner "${psql[@]}" -c "CREATE DATABASE runfacts OWNER runfacts" >/dev/null
  fi
}

# wal_level=logical (for Debezium) on a cluster made before it was the default here: set it
# and restart once; a server already logical is not touched.
ensure_logical() {
  [ "$(psql_admin -c "SHOW wal_level")" = logical ] && return 0
  say "wal_level is $(psql_admin -c "SHOW wal_level"); setting wal_level=logical and restarting once"
  psql_admin -c "ALTER SYSTEM SET wal_level = logical" >/dev/null
  if [ "$(psql_admin -c "SHOW max_replication_slots")" -lt 20 ]; then
    psql_admin -c "ALTER SYSTEM SET max_replication_slots = 20" >/dev/null
  fi
  if [ "$(psql_admin -c "SHOW max_wal_senders")" -lt 20 ]; then
    psql_admin -c "ALTER SYSTEM SET max_wal_senders = 20" >/dev/null
  fi
  as_owner "$(find_bin)/pg_ctl" -D "$data" -l "$log" -m fast -w -t "$timeout_s" restart >/dev/null \
    || { say "restart failed:"; tail -40 "$log" >&2; exit 1; }
  [ "$(psql_admin -c "SHOW wal_level")" = logical ] || { say "wal_level is still not logical: see $log"; exit 1; }
}

start() {
  install_if_missing
  if running; then
    say "already running on 127.0.0.1:$port"; ensure_logical; create_role_and_db; return 0
  fi
  if port_busy; then
    say "port $port is taken by a server this script did not start (set RUNFACTS_PG_PORT)"; exit 1
  fi
  init_cluster
  say "starting on 127.0.0.1:$port (log: $log)"
  touch "$log"; [ "$(id -u)" = 0 ] && chown postgres: "$log"
  as_owner "$(find_bin)/pg_ctl" -D "$data" -l "$log" -w -t "$timeout_s" start >/dev/null \
    || { say "start failed:"; tail -40 "$log" >&2; exit 1; }
  ensure_logical
  create_role_and_db
  say "started; dsn $dsn"
}

stop() {
  if ! running; then say "not running"; return 0; fi
  as_owner "$(find_bin)/pg_ctl" -D "$data" -m fast -w stop >/dev/null
  say "stopped"
}

status() {
  if running; then echo "running dsn=$dsn"; else echo "stopped"; return 3; fi
}

case "${1:-}" in
  install) install_if_missing ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) status ;;
  dsn) echo "$dsn" ;;
  logs) tail -n "${2:-100}" "$log" ;;
  *) echo "usage: $0 install|start|stop|restart|status|dsn|logs" >&2; exit 2 ;;
esac
