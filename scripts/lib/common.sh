# Shared by the service scripts (kafka.sh, kafka-cluster.sh, kafka-connect.sh): sourced, not run.
# running/stop work on the pid file $pidf of a script that runs one process (kafka-cluster.sh
# defines its own for its nodes after sourcing this).
# Each script defines its own `say` (its name as the prefix) before using these.

# maven_fetch POM DIR WHAT [mvn args…]: copy POM's runtime dependencies from Maven Central into DIR,
# once (a .complete marker makes later calls free; an interrupted fetch leaves no marker).
maven_fetch() {
  local pom="$1" dir="$2" what="$3"; shift 3
  if [ -f "$dir/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || { say "mvn not found: install Maven (apt-get install maven)"; exit 1; }
  say "fetching $what from Maven Central into $dir"
  mkdir -p "$dir"
  mvn -q -B -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dir" -DincludeScope=runtime "$@"
  touch "$dir/.complete"
}

# listener_pid PORT: the pid listening on TCP port PORT (empty when none, or when this user cannot
# see it); ss when installed, else /proc/net/tcp and the processes' socket fds.
listener_pid() {
  local p="$1" hex inode fd
  if command -v ss >/dev/null; then
    ss -ltnpH "sport = :$p" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2
    return 0
  fi
  hex="$(printf ':%04X' "$p")"
  inode="$(awk -v h="$hex" '$4 == "0A" && substr($2, length($2) - 4) == h { print $10; exit }' \
           /proc/net/tcp /proc/net/tcp6 2>/dev/null)"
  [ -n "$inode" ] || return 0
  for fd in /proc/[0-9]*/fd/*; do
    if [ "$(readlink "$fd" 2>/dev/null)" = "socket:[$inode]" ]; then
      fd="${fd#/proc/}"; echo "${fd%%/*}"; return 0
    fi
  done
}

# port_listening PORT: true when something accepts connections on 127.0.0.1:PORT.
port_listening() {
  if command -v ss >/dev/null; then [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]; return; fi
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The process recorded in the script's pid file ($pidf) is alive.
running() {
  [ -f "$pidf" ] && kill -0 "$(cat "$pidf")" 2>/dev/null
}

# Stop the process of $pidf: TERM, up to 30 s for it to exit, then KILL; the pid file goes.
stop() {
  if ! running; then say "not running"; rm -f "$pidf"; return 0; fi
  local pid; pid="$(cat "$pidf")"
  say "stopping pid $pid"
  kill -TERM "$pid"
  for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
  if kill -0 "$pid" 2>/dev/null; then say "did not stop in 30s; killing"; kill -KILL "$pid"; fi
  rm -f "$pidf"
  say "stopped"
}
