#!/usr/bin/env bash
# A SECOND local broker with authentication and authorization, next to the shared one:
# a SASL_PLAINTEXT listener with SCRAM-SHA-512 and the KRaft ACL authorizer
# (StandardAuthorizer, deny when no ACL matches). It reuses scripts/kafka.sh with its own
# state directory and ports, so the plaintext broker on 9092 is never touched.
#
#   scripts/kafka-secure.sh start|stop|status|logs
#
# Settings (environment):
#   RUNFACTS_SECURE_HOME        state directory (default <repo>/.runfacts-secure); never the shared broker's
#   KAFKA_SECURE_PORT           SASL_PLAINTEXT listener (29092)
#   KAFKA_SECURE_CONTROLLER_PORT controller listener, PLAINTEXT on 127.0.0.1 (29093)
#   KAFKA_SCRAM_ADMIN           super user created at format time (admin)
#   KAFKA_SCRAM_ADMIN_PASSWORD  its password ([A-Za-z0-9_-]); generated into
#                               $RUNFACTS_SECURE_HOME/admin.password (mode 600) when unset
#   KAFKA_LIBS                  broker jars (default: the shared broker's cache)
# Other SCRAM users (one per component) are created by the admin through the AdminClient:
# `runfacts security user NAME`. The broker-to-controller connection is PLAINTEXT on the
# loopback address, whose principal (User:ANONYMOUS) must be a super user for the broker to
# register; production controllers use SSL or SASL listeners instead (docs/security.md).
set -euo pipefail
umask 077  # server.properties holds the admin's password (inter-broker login)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
shared_home="${RUNFACTS_HOME:-$repo/.runfacts}"
home="${RUNFACTS_SECURE_HOME:-$repo/.runfacts-secure}"
port="${KAFKA_SECURE_PORT:-29092}"
cport="${KAFKA_SECURE_CONTROLLER_PORT:-29093}"
admin="${KAFKA_SCRAM_ADMIN:-admin}"

say() { printf 'kafka-secure: %s\n' "$*" >&2; }

[ "$(realpath -m "$home")" != "$(realpath -m "$shared_home")" ] \
  || { say "RUNFACTS_SECURE_HOME must differ from the shared broker's home ($shared_home)"; exit 2; }
[ "$port" != "${KAFKA_PORT:-9092}" ] || { say "KAFKA_SECURE_PORT must differ from the shared broker's port"; exit 2; }

admin_password() {
  if [ -n "${KAFKA_SCRAM_ADMIN_PASSWORD:-}" ]; then printf '%s' "$KAFKA_SCRAM_ADMIN_PASSWORD"; return; fi
  mkdir -p "$home"
  if [ ! -s "$home/admin.password" ]; then
    head -c 24 /dev/urandom | base64 | tr -d '/+=\n' > "$home/admin.password"
  fi
  cat "$home/admin.password"
}

write_extra() {
  local password="$1"
  [[ "$password" =~ ^[A-Za-z0-9_-]+$ ]] || { say "admin password must match [A-Za-z0-9_-]+"; exit 2; }
  mkdir -p "$home"
  cat > "$home/secure.properties" <<EOF
listeners=SASL_PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$admin" password="$password";
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:$admin;User:ANONYMOUS
EOF
}

delegate() {
  RUNFACTS_HOME="$home" KAFKA_PORT="$port" KAFKA_CONTROLLER_PORT="$cport" \
  KAFKA_LIBS="${KAFKA_LIBS:-$shared_home/kafka/libs}" KAFKA_HEAP="${KAFKA_HEAP:-384m}" \
  KAFKA_EXTRA_PROPERTIES="$home/secure.properties" KAFKA_FORMAT_ARGS="${KAFKA_FORMAT_ARGS:-}" \
    bash "$here/kafka.sh" "$@"
}

case "${1:-}" in
  start)
    password="$(admin_password)"
    write_extra "$password"
    KAFKA_FORMAT_ARGS="--add-scram SCRAM-SHA-512=[name=$admin,password=$password]" delegate start
    say "SASL_PLAINTEXT SCRAM-SHA-512 on 127.0.0.1:$port; super user $admin"
    ;;
  stop|status) delegate "$1" ;;
  logs) delegate logs "${2:-100}" ;;
  *) echo "usage: $0 start|stop|status|logs" >&2; exit 2 ;;
esac
