#!/usr/bin/env bash
# A SECOND local broker with authentication and authorization, next to the shared one:
# a SASL_PLAINTEXT listener and a SASL_SSL (TLS) listener, both SCRAM-SHA-512, and the KRaft ACL
# authorizer (StandardAuthorizer, deny when no ACL matches). The TLS certificate is signed by a
# self-signed CA the script makes once with openssl ($RUNFACTS_SECURE_HOME/tls/ca.pem: what a
# client's ssl.ca.location names; the broker's certificate is for 127.0.0.1 and localhost). It reuses scripts/kafka.sh with its own
# state directory and ports, so the plaintext broker on 9092 is never touched.
#
#   scripts/kafka-secure.sh start|stop|status|logs
#
# Settings (environment):
#   RUNFACTS_SECURE_HOME        state directory (default <repo>/.runfacts-secure); never the shared broker's
#   KAFKA_SECURE_PORT           SASL_PLAINTEXT listener (29092)
#   KAFKA_SECURE_CONTROLLER_PORT controller listener, PLAINTEXT on 127.0.0.1 (29093)
#   KAFKA_SECURE_TLS_PORT       SASL_SSL listener (29094)
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
tport="${KAFKA_SECURE_TLS_PORT:-29094}"
tls="$home/tls"
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

# A CA and a broker certificate signed by it (once; kept in $tls): ca.pem for clients, a PKCS12
# keystore for the broker, its password in keystore.password (mode 600).
make_tls() {
  command -v openssl >/dev/null || { say "openssl not found: apt-get install openssl"; exit 1; }
  mkdir -p "$tls"
  [ -s "$tls/broker.p12" ] && [ -s "$tls/ca.pem" ] && [ -s "$tls/keystore.password" ] && return 0
  head -c 18 /dev/urandom | base64 | tr -d '/+=\n' > "$tls/keystore.password"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=runfacts local test CA" \
    -keyout "$tls/ca.key" -out "$tls/ca.pem" 2>/dev/null
  openssl req -newkey rsa:2048 -nodes -subj "/CN=127.0.0.1" \
    -keyout "$tls/broker.key" -out "$tls/broker.csr" 2>/dev/null
  printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' > "$tls/broker.ext"
  openssl x509 -req -in "$tls/broker.csr" -CA "$tls/ca.pem" -CAkey "$tls/ca.key" -CAcreateserial \
    -days 3650 -extfile "$tls/broker.ext" -out "$tls/broker.pem" 2>/dev/null
  openssl pkcs12 -export -in "$tls/broker.pem" -inkey "$tls/broker.key" -certfile "$tls/ca.pem" \
    -name broker -out "$tls/broker.p12" -passout "file:$tls/keystore.password"
  say "TLS: CA $tls/ca.pem, broker certificate for 127.0.0.1/localhost"
}

write_extra() {
  local password="$1" store_password
  store_password="$(cat "$tls/keystore.password")"
  [[ "$password" =~ ^[A-Za-z0-9_-]+$ ]] || { say "admin password must match [A-Za-z0-9_-]+"; exit 2; }
  mkdir -p "$home"
  cat > "$home/secure.properties" <<EOF
listeners=SASL_PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$tport,CONTROLLER://127.0.0.1:$cport
advertised.listeners=SASL_PLAINTEXT://127.0.0.1:$port,SASL_SSL://127.0.0.1:$tport
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=SASL_PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$admin" password="$password";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="$admin" password="$password";
ssl.keystore.type=PKCS12
ssl.keystore.location=$tls/broker.p12
ssl.keystore.password=$store_password
ssl.key.password=$store_password
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
    [ "$tport" != "$port" ] && [ "$tport" != "${KAFKA_PORT:-9092}" ] \
      || { say "KAFKA_SECURE_TLS_PORT must differ from the other listeners' ports"; exit 2; }
    password="$(admin_password)"
    make_tls
    write_extra "$password"
    KAFKA_FORMAT_ARGS="--add-scram SCRAM-SHA-512=[name=$admin,password=$password]" delegate start
    say "SCRAM-SHA-512 on SASL_PLAINTEXT 127.0.0.1:$port and SASL_SSL 127.0.0.1:$tport (CA $tls/ca.pem); super user $admin"
    ;;
  stop|status) delegate "$1" ;;
  logs) delegate logs "${2:-100}" ;;
  *) echo "usage: $0 start|stop|status|logs" >&2; exit 2 ;;
esac
