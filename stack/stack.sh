#!/usr/bin/env bash
# Starts, stops and reports the auditor's backing services natively on loopback:
# Apache Kafka (KRaft, 1 or 3 brokers), PostgreSQL (as the postgres OS user) and Redis.
#
#   stack/stack.sh up [--brokers 1|3]     start what is not running, write the env file
#   stack/stack.sh down                   stop everything of this stack
#   stack/stack.sh status                 one line per service
#   stack/stack.sh broker stop|kill|start ID   stop (SIGTERM), kill -9 or restart one broker
#   stack/stack.sh broker pause|resume ID      freeze (SIGSTOP) or thaw (SIGCONT) one broker
#   stack/stack.sh broker pid ID               print one broker's process id (empty: not running)
#
# STACK=dev (default) uses ports 9092.. / 5433 / 6380 and writes .env;
# STACK=test uses 19092.. / 15433 / 16380 and writes var/test/stack.env.
# Each broker also has a SASL_SSL listener (SCRAM-SHA-512) on 9392.. (19392.. for test), and
# PostgreSQL accepts TLS: the CA, the server certificates and the SCRAM user are generated
# at the first `up` with openssl and Kafka's admin API (nothing downloaded), under var/<stack>/tls.
# STACK_PORT_BASE=N moves every port of this checkout's stack by N instead (e.g. 20000 for a
# second checkout's test stack beside the first); it is remembered in var/<stack>/port-base.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
STACK="${STACK:-dev}"
case "$STACK" in
  dev)  PORT_BASE=0 ;;
  test) PORT_BASE=10000 ;;
  *) echo "STACK must be dev or test, not '$STACK'" >&2; exit 2 ;;
esac
VAR="$ROOT/var/$STACK"
if [[ -n ${STACK_PORT_BASE:-} ]]; then
  [[ $STACK_PORT_BASE =~ ^[0-9]+$ && $STACK_PORT_BASE -le 50000 ]] \
    || { echo "STACK_PORT_BASE must be a whole number up to 50000, not '$STACK_PORT_BASE'" >&2; exit 2; }
  PORT_BASE=$STACK_PORT_BASE
  mkdir -p "$VAR"; echo "$PORT_BASE" >"$VAR/port-base"
elif [[ -f $VAR/port-base ]]; then
  PORT_BASE=$(cat "$VAR/port-base")
fi
KAFKA_LIBS="$ROOT/.cache/kafka/libs"
KAFKA_PORT=$((9092 + PORT_BASE)); CONTROLLER_PORT=$((9192 + PORT_BASE)); SECURE_PORT=$((9392 + PORT_BASE))
TLS="$VAR/tls"
SASL_USERNAME=auditor
PG_PORT=$((5433 + PORT_BASE)); REDIS_PORT=$((6380 + PORT_BASE))
PG_BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)"
PG_SOCK="/tmp/auditor-pg-$STACK-$PG_PORT"
if [[ $STACK == dev ]]; then ENV_FILE="$ROOT/.env"; else ENV_FILE="$VAR/stack.env"; fi

say() { printf '\033[1m[%s]\033[0m %s\n' "$STACK" "$*"; }
fail() { printf '[%s] ERROR: %s\n' "$STACK" "$*" >&2; exit 1; }

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # description timeout-seconds log command...
  local what=$1 timeout=$2 log=$3; shift 3
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < deadline)) || fail "$what did not become ready within ${timeout}s; see $log"
    sleep 0.5
  done
}
brokers_configured() { cat "$VAR/kafka/brokers" 2>/dev/null || echo 0; }

# ---------------------------------------------------------------- Kafka --------
kafka_conf() {  # id count
  local id=$1 n=$2 voters="" i
  for ((i = 1; i <= n; i++)); do voters+="${voters:+,}$i@127.0.0.1:$((CONTROLLER_PORT + i - 1))"; done
  local rf=1 isr=1
  ((n >= 3)) && { rf=3; isr=2; }
  cat <<CONF
process.roles=broker,controller
node.id=$id
controller.quorum.voters=$voters
listeners=PLAINTEXT://127.0.0.1:$((KAFKA_PORT + id - 1)),SASL_SSL://127.0.0.1:$((SECURE_PORT + id - 1)),CONTROLLER://127.0.0.1:$((CONTROLLER_PORT + id - 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$((KAFKA_PORT + id - 1)),SASL_SSL://127.0.0.1:$((SECURE_PORT + id - 1))
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
sasl.enabled.mechanisms=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
ssl.keystore.type=PEM
ssl.keystore.location=$TLS/broker-keystore.pem
ssl.client.auth=none
log.dirs=$VAR/kafka/$id/data
num.partitions=1
default.replication.factor=$rf
min.insync.replicas=$isr
offsets.topic.replication.factor=$rf
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=$rf
transaction.state.log.min.isr=$isr
transaction.state.log.num.partitions=10
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
delete.topic.enable=true
log.retention.check.interval.ms=5000
log.cleaner.backoff.ms=2000
log.segment.delete.delay.ms=1000
CONF
}

kafka_java() {  # extra args...
  java -Xms128m -Xmx512m -XX:+UseG1GC -XX:TieredStopAtLevel=1 \
    -Dlog4j2.configurationFile="$ROOT/stack/kafka/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" "$@"
}

kafka_start_one() {  # id
  local id=$1 dir="$VAR/kafka/$1" port=$((KAFKA_PORT + $1 - 1))
  if pid_alive "$dir/pid"; then return 0; fi
  if port_open "$port"; then fail "Kafka broker $id: port $port is already taken by another process"; fi
  say "starting Kafka broker $id on 127.0.0.1:$port (log: $dir/broker.log)"
  if [[ -f $dir/broker.log ]] && (($(stat -c %s "$dir/broker.log") > 50 * 1024 * 1024)); then
    mv -f "$dir/broker.log" "$dir/broker.log.1"  # one earlier file kept, not an ever-growing one
  fi
  nohup java -Xms128m -Xmx768m -XX:+UseG1GC \
    -Dlog4j2.configurationFile="$ROOT/stack/kafka/log4j2.properties" \
    -cp "$KAFKA_LIBS/*" kafka.Kafka "$dir/server.properties" >>"$dir/broker.log" 2>&1 &
  echo $! >"$dir/pid"
}

kafka_up() {
  local n=$1 configured i
  [[ -d $KAFKA_LIBS ]] || fail "Kafka jars are missing in $KAFKA_LIBS: run stack/bootstrap.sh first"
  configured=$(brokers_configured)
  if [[ $configured != 0 && $configured != "$n" ]]; then
    say "Kafka was formatted for $configured broker(s), $n requested: reformatting (data is lost)"
    kafka_down; rm -rf "$VAR/kafka"
  fi
  if [[ ! -f $VAR/kafka/brokers ]]; then
    mkdir -p "$VAR/kafka"
    local cid
    cid=$(kafka_java kafka.tools.StorageTool random-uuid 2>>"$VAR/kafka/format.log" | tail -1) \
      || fail "Kafka storage tool failed; see $VAR/kafka/format.log"
    for ((i = 1; i <= n; i++)); do
      mkdir -p "$VAR/kafka/$i"
      kafka_conf "$i" "$n" >"$VAR/kafka/$i/server.properties"
      kafka_java kafka.tools.StorageTool format --ignore-formatted -t "$cid" \
        -c "$VAR/kafka/$i/server.properties" >>"$VAR/kafka/format.log" 2>&1 \
        || fail "formatting Kafka storage for broker $i failed; see $VAR/kafka/format.log"
    done
    echo "$n" >"$VAR/kafka/brokers"
  fi
  # A stack formatted before a setting was added (e.g. the SASL_SSL listener) keeps its data:
  # only server.properties is rewritten, and a broker running with the old one is restarted.
  for ((i = 1; i <= n; i++)); do
    local props="$VAR/kafka/$i/server.properties"
    kafka_conf "$i" "$n" >"$props.new"
    if cmp -s "$props.new" "$props"; then rm -f "$props.new"; continue; fi
    mv "$props.new" "$props"
    if pid_alive "$VAR/kafka/$i/pid"; then
      say "Kafka broker $i: configuration changed, restarting it"
      kafka_stop_one "$i" TERM
    fi
  done
  for ((i = 1; i <= n; i++)); do kafka_start_one "$i"; done
  for ((i = 1; i <= n; i++)); do
    wait_for "Kafka broker $i" 90 "$VAR/kafka/$i/broker.log" kafka_ready "$i"
  done
  wait_for "Kafka cluster ($n brokers)" 90 "$VAR/kafka/1/broker.log" \
    "$ROOT/.venv/bin/python" "$ROOT/stack/ready.py" kafka "$(bootstrap_servers "$n")" "$n"
  # The SCRAM user, through the admin API on the plaintext listener (the password travels in
  # the environment, never on a command line); then a SASL_SSL client must get metadata.
  "$ROOT/.venv/bin/python" "$ROOT/stack/ready.py" scram-user \
    "$(bootstrap_servers "$n")" "$SASL_USERNAME" >>"$VAR/kafka/format.log" 2>&1 \
    || fail "creating the SCRAM user $SASL_USERNAME failed; see $VAR/kafka/format.log"
  wait_for "Kafka SASL_SSL listener" 60 "$VAR/kafka/1/broker.log" \
    "$ROOT/.venv/bin/python" "$ROOT/stack/ready.py" kafka-secure "$(secure_bootstrap_servers "$n")" "$n" \
    "$SASL_USERNAME" "$TLS/ca.pem"
}

kafka_ready() {  # id: process alive and port open
  local dir="$VAR/kafka/$1"
  pid_alive "$dir/pid" || fail "Kafka broker $1 exited during start-up; see $dir/broker.log"
  port_open $((KAFKA_PORT + $1 - 1))
}

bootstrap_servers() {
  local n=$1 i s=""
  for ((i = 1; i <= n; i++)); do s+="${s:+,}127.0.0.1:$((KAFKA_PORT + i - 1))"; done
  echo "$s"
}

secure_bootstrap_servers() {
  local n=$1 i s=""
  for ((i = 1; i <= n; i++)); do s+="${s:+,}127.0.0.1:$((SECURE_PORT + i - 1))"; done
  echo "$s"
}

# ---------------------------------------------------------------- TLS ----------
# One CA per stack; one server certificate (127.0.0.1 and localhost) for the brokers' SASL_SSL
# listeners and PostgreSQL. EC P-256 keys in PKCS#8, which Kafka's PEM keystore, PostgreSQL,
# librdkafka, libpq and the JDBC driver all read. Files that exist are kept.
tls_up() {
  [[ -f $TLS/ca.pem && -f $TLS/server.pem && -f $TLS/broker-keystore.pem ]] && return 0
  command -v openssl >/dev/null || fail "openssl not found (apt-get install openssl)"
  local started; started=$(date +%s%N)
  mkdir -p "$TLS"; chmod 755 "$TLS"
  (
    umask 077
    cd "$TLS"
    [[ -f ca.key ]] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out ca.key
    [[ -f ca.pem ]] || openssl req -x509 -new -key ca.key -sha256 -days 3650 \
      -subj "/CN=kafka-auditor $STACK stack CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out ca.pem
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out server.key
    openssl req -new -key server.key -subj "/CN=localhost" -out server.csr
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "basicConstraints=CA:FALSE" \
      "keyUsage=critical,digitalSignature,keyAgreement" "extendedKeyUsage=serverAuth" >server.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -sha256 -days 825 \
      -extfile server.ext -out server.pem
    cat server.key server.pem >broker-keystore.pem.tmp && mv broker-keystore.pem.tmp broker-keystore.pem
    rm -f server.csr server.ext
    chmod 644 ca.pem server.pem
  ) >"$VAR/tls.log" 2>&1 || fail "generating the stack's certificates failed; see $VAR/tls.log"
  local ms=$(( ($(date +%s%N) - started) / 1000000 ))
  echo "$ms" >"$TLS/generated-in-ms"
  say "generated a CA and server certificates in ${ms} ms ($TLS)"
}

kafka_stop_one() {  # id signal
  local dir="$VAR/kafka/$1" sig=${2:-TERM} pid
  pid_alive "$dir/pid" || { rm -f "$dir/pid"; return 0; }
  pid=$(cat "$dir/pid")
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  # A killed JVM holds its listening ports until it is gone: a restart must not find them taken.
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  rm -f "$dir/pid"
}

kafka_down() {
  local n i
  n=$(brokers_configured)
  for ((i = n; i >= 1; i--)); do kafka_stop_one "$i" TERM & done
  wait
}

# ---------------------------------------------------------------- PostgreSQL ---
pg_as() { (cd / && runuser -u postgres -- "$@"); }
pg_dir() { readlink -f "$VAR/postgres"; }  # the real path: the postgres user may not enter $VAR
# The cluster's files must be reachable by the postgres user. A checkout under a private
# home (e.g. /root, mode 700) is not, so there the data lives under /var/lib and
# var/<stack>/postgres is a link to it.
pg_dir_prepare() {
  [[ -e $VAR/postgres ]] && return 0
  mkdir -p "$VAR"
  if runuser -u postgres -- test -x "$VAR"; then
    mkdir -p "$VAR/postgres"
  else
    local outside
    outside="/var/lib/kafka-auditor/$(printf '%s' "$ROOT" | sha256sum | cut -c1-12)-$STACK/postgres"
    rm -rf "$outside"  # no link points at it: left over from a removed var/, not ours to reuse
    mkdir -p "$outside"
    ln -s "$outside" "$VAR/postgres"
    say "PostgreSQL data in $outside (the postgres user cannot enter $VAR)"
  fi
}
pg_up() {
  local data log
  [[ -n $PG_BIN ]] || fail "PostgreSQL server binaries not found under /usr/lib/postgresql (apt-get install postgresql)"
  id postgres >/dev/null 2>&1 || fail "the postgres OS user is missing (install the postgresql package)"
  [[ $(id -u) == 0 ]] || fail "PostgreSQL: the stack runs its own cluster as the postgres OS user, which needs root (run make as root)"
  pg_dir_prepare
  local dir; dir=$(pg_dir)
  data="$dir/data"; log="$dir/postgres.log"
  chown postgres:postgres "$dir"
  [[ -L $VAR/postgres ]] && chmod 755 "$(dirname "$dir")" "$(dirname "$(dirname "$dir")")"
  if [[ ! -f $data/PG_VERSION ]]; then
    say "initialising PostgreSQL cluster in $data"
    local pwfile="$dir/.pw"
    printf '%s\n' "$PG_SUPER_PASSWORD" >"$pwfile"; chown postgres "$pwfile"; chmod 600 "$pwfile"
    pg_as "$PG_BIN/initdb" -D "$data" -U postgres --pwfile="$pwfile" --auth-local=peer \
      --auth-host=scram-sha-256 -E UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
      || fail "PostgreSQL initdb failed; see $dir/initdb.log"
    rm -f "$pwfile"
  fi
  if ! pg_as "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1; then
    port_open "$PG_PORT" && fail "PostgreSQL: port $PG_PORT is already taken by another process"
    say "starting PostgreSQL on 127.0.0.1:$PG_PORT (log: $log)"
    mkdir -p "$PG_SOCK"; chown postgres "$PG_SOCK"
    touch "$log"; chown postgres "$log"
    pg_as "$PG_BIN/pg_ctl" -D "$data" -l "$log" -w -t 60 \
      -o "-p $PG_PORT -k $PG_SOCK -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off -c synchronous_commit=off" \
      start >/dev/null || fail "PostgreSQL failed to start; see $log"
  fi
  wait_for "PostgreSQL" 60 "$log" pg_as "$PG_BIN/pg_isready" -q -h "$PG_SOCK" -p "$PG_PORT"
  # Roles and databases (idempotent).
  pg_psql -v ON_ERROR_STOP=1 -q <<SQL >/dev/null || fail "creating PostgreSQL roles failed; see $log"
SELECT 'CREATE ROLE auditor LOGIN CREATEDB' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname='auditor')\gexec
ALTER ROLE auditor WITH LOGIN CREATEDB PASSWORD '$APP_DB_PASSWORD';
SELECT 'CREATE DATABASE auditor OWNER auditor' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname='auditor')\gexec
SELECT 'CREATE DATABASE auditor_source OWNER auditor' WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname='auditor_source')\gexec
SQL
  pg_tls "$data"
}
# TLS for clients that ask for it (sslmode=require/verify-full): the stack's server certificate,
# copied into the data directory for the postgres user; ssl=on takes effect on reload, so a
# cluster started before this existed gains it without a restart.
pg_tls() {  # data-dir
  local data=$1
  if ! cmp -s "$TLS/server.pem" "$data/server.crt" 2>/dev/null; then
    install -o postgres -g postgres -m 600 "$TLS/server.key" "$data/server.key"
    install -o postgres -g postgres -m 644 "$TLS/server.pem" "$data/server.crt"
  fi
  # auditor_tls (a member of auditor) may connect over TLS only: a source URL with it proves
  # that a client really used TLS, as a production database that requires it would.
  local hba="$data/pg_hba.conf"
  if ! grep -q '^hostnossl all auditor_tls' "$hba"; then
    { echo "hostnossl all auditor_tls 0.0.0.0/0 reject"; cat "$hba"; } >"$hba.new"
    chown postgres:postgres "$hba.new"; chmod 600 "$hba.new"; mv "$hba.new" "$hba"
  fi
  pg_psql -v ON_ERROR_STOP=1 -q -t -A <<SQL >/dev/null || fail "turning on TLS in PostgreSQL failed; see $(pg_dir)/postgres.log"
SELECT 'CREATE ROLE auditor_tls LOGIN' WHERE NOT EXISTS (SELECT FROM pg_roles WHERE rolname='auditor_tls')\gexec
ALTER ROLE auditor_tls WITH LOGIN PASSWORD '$APP_DB_PASSWORD';
GRANT auditor TO auditor_tls;
SELECT 'ALTER SYSTEM SET ssl = on' WHERE current_setting('ssl') <> 'on'\gexec
SELECT pg_reload_conf();
SQL
  local tries
  for tries in $(seq 1 20); do
    [[ $(pg_psql -t -A -c "SHOW ssl") == on ]] && return 0
    sleep 0.25
  done
  fail "PostgreSQL did not turn TLS on; see $(pg_dir)/postgres.log"
}
pg_psql() { pg_as psql -h "$PG_SOCK" -p "$PG_PORT" -U postgres -d postgres "$@"; }
pg_down() {
  [[ -e $VAR/postgres ]] || return 0
  local data; data="$(pg_dir)/data"
  [[ -f $data/PG_VERSION ]] || return 0
  pg_as "$PG_BIN/pg_ctl" -D "$data" status >/dev/null 2>&1 || return 0
  pg_as "$PG_BIN/pg_ctl" -D "$data" -m fast -w stop >/dev/null || true
}

# ---------------------------------------------------------------- Redis --------
redis_up() {
  local dir="$VAR/redis"
  command -v redis-server >/dev/null || fail "redis-server not found (apt-get install redis-server)"
  mkdir -p "$dir"
  if ! pid_alive "$dir/redis.pid"; then
    port_open "$REDIS_PORT" && fail "Redis: port $REDIS_PORT is already taken by another process"
    say "starting Redis on 127.0.0.1:$REDIS_PORT (log: $dir/redis.log)"
    redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --daemonize yes --pidfile "$dir/redis.pid" \
      --logfile "$dir/redis.log" --dir "$dir" --save "" --appendonly no \
      || fail "Redis failed to start; see $dir/redis.log"
  fi
  wait_for "Redis" 30 "$dir/redis.log" redis_ping
}
redis_ping() { [[ $(redis-cli -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; }
redis_down() {
  local dir="$VAR/redis"
  pid_alive "$dir/redis.pid" || return 0
  redis-cli -p "$REDIS_PORT" shutdown nosave >/dev/null 2>&1 || kill "$(cat "$dir/redis.pid")" || true
  rm -f "$dir/redis.pid"
}

# ---------------------------------------------------------------- env file -----
load_credentials() {
  local cred="$VAR/credentials"
  mkdir -p "$VAR"
  if [[ ! -f $cred ]]; then
    umask 077
    {
      echo "PG_SUPER_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
      echo "APP_DB_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
      echo "DJANGO_SECRET_KEY=$(head -c 48 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
      echo "ADMIN_PASSWORD=$(head -c 12 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')"
    } >"$cred"
  fi
  if ! grep -q '^KAFKA_SASL_PASSWORD=' "$cred"; then  # a stack from before the SASL listener
    (umask 077; echo "KAFKA_SASL_PASSWORD=$(head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9')" >>"$cred")
  fi
  # shellcheck disable=SC1090
  . "$cred"
  # stack/ready.py reads it from the environment: a password never goes on a command line.
  export KAFKA_SASL_PASSWORD
}

write_env() {
  local n=$1 tmp="$ENV_FILE.tmp"
  umask 077
  cat >"$tmp" <<ENV
# Written by stack/stack.sh up (STACK=$STACK). Loopback-only services of this checkout.
STACK=$STACK
DATABASE_URL=postgresql://auditor:$APP_DB_PASSWORD@127.0.0.1:$PG_PORT/auditor
SOURCE_DATABASE_URL=postgresql://auditor:$APP_DB_PASSWORD@127.0.0.1:$PG_PORT/auditor_source
PG_SUPERUSER_DSN=postgresql://postgres:$PG_SUPER_PASSWORD@127.0.0.1:$PG_PORT/postgres
APP_DB_PASSWORD=$APP_DB_PASSWORD
KAFKA_BOOTSTRAP_SERVERS=$(bootstrap_servers "$n")
KAFKA_BROKERS=$n
KAFKA_SECURE_BOOTSTRAP_SERVERS=$(secure_bootstrap_servers "$n")
KAFKA_SASL_USERNAME=$SASL_USERNAME
KAFKA_SASL_PASSWORD=$KAFKA_SASL_PASSWORD
KAFKA_CA_LOCATION=$TLS/ca.pem
# Quoted: the shell that sources this file would take & for a background job.
SOURCE_DATABASE_TLS_URL='postgresql://auditor_tls:$APP_DB_PASSWORD@127.0.0.1:$PG_PORT/auditor_source?sslmode=verify-full&sslrootcert=$TLS/ca.pem'
REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
DJANGO_SECRET_KEY=$DJANGO_SECRET_KEY
AUDITOR_ADMIN_PASSWORD=$ADMIN_PASSWORD
SPARK_JARS_DIR=$ROOT/.cache/spark/jars
ENV
  if [[ $STACK == test ]]; then
    # The tests run a webhook receiver on loopback, which production refuses.
    echo "AUDITOR_WEBHOOK_ALLOW_PRIVATE=true" >>"$tmp"
  fi
  mv "$tmp" "$ENV_FILE"
}

status() {
  local n i
  n=$(brokers_configured)
  for ((i = 1; i <= n; i++)); do
    if pid_alive "$VAR/kafka/$i/pid" && port_open $((KAFKA_PORT + i - 1)); then
      echo "kafka-$i    up    127.0.0.1:$((KAFKA_PORT + i - 1)) (SASL_SSL 127.0.0.1:$((SECURE_PORT + i - 1)))"
    else echo "kafka-$i    down  (log: $VAR/kafka/$i/broker.log)"; fi
  done
  ((n > 0)) || echo "kafka      not set up"
  if [[ -n $PG_BIN ]] && pg_as "$PG_BIN/pg_isready" -q -h "$PG_SOCK" -p "$PG_PORT" 2>/dev/null; then
    echo "postgres   up    127.0.0.1:$PG_PORT"
  else echo "postgres   down  (log: $VAR/postgres/postgres.log)"; fi
  if redis_ping; then echo "redis      up    127.0.0.1:$REDIS_PORT"
  else echo "redis      down  (log: $VAR/redis/redis.log)"; fi
}

cmd=${1:-status}; shift || true
case "$cmd" in
  up)
    brokers=${BROKERS:-}
    while (($#)); do
      case "$1" in
        --brokers) brokers=$2; shift 2 ;;
        *) fail "unknown option $1" ;;
      esac
    done
    [[ -z $brokers ]] && brokers=$(brokers_configured) && [[ $brokers == 0 ]] && brokers=1
    [[ $brokers == 1 || $brokers == 3 ]] || fail "--brokers must be 1 or 3, not $brokers"
    command -v java >/dev/null || fail "Java is not installed (Kafka needs Java 17+): run stack/bootstrap.sh"
    load_credentials
    tls_up
    redis_up
    pg_up
    kafka_up "$brokers"
    write_env "$brokers"
    say "services up; settings in ${ENV_FILE#"$ROOT"/}"
    status
    ;;
  down)
    kafka_down; pg_down; redis_down
    say "services stopped"
    ;;
  status) status ;;
  broker)
    action=${1:-}; id=${2:-}
    [[ $id =~ ^[0-9]+$ && $id -ge 1 && $id -le $(brokers_configured) ]] || fail "broker id must be 1..$(brokers_configured)"
    case "$action" in
      stop) kafka_stop_one "$id" TERM; say "broker $id stopped" ;;
      kill) kafka_stop_one "$id" KILL; say "broker $id killed (-9)" ;;
      pause|resume)
        # A frozen broker keeps its sockets open but answers nothing: clients time out
        # (request.timeout.ms) instead of seeing a closed connection.
        pid_alive "$VAR/kafka/$id/pid" || fail "broker $id is not running"
        if [[ $action == pause ]]; then kill -STOP "$(cat "$VAR/kafka/$id/pid")"; say "broker $id paused (SIGSTOP)"
        else kill -CONT "$(cat "$VAR/kafka/$id/pid")"; say "broker $id resumed (SIGCONT)"; fi ;;
      pid) if pid_alive "$VAR/kafka/$id/pid"; then cat "$VAR/kafka/$id/pid"; fi ;;
      start)
        kafka_start_one "$id"
        wait_for "Kafka broker $id" 90 "$VAR/kafka/$id/broker.log" kafka_ready "$id"
        say "broker $id started" ;;
      *) fail "usage: stack.sh broker stop|kill|start|pause|resume|pid ID" ;;
    esac
    ;;
  reassign)
    # Move one partition to these replicas (the first preferred as leader) and wait until done:
    # the lab and tests shape a replica set before a fault with it (stack/kafka/Reassign.java).
    topic=${1:-}; partition=${2:-}; replicas=${3:-}
    [[ -n $topic && $partition =~ ^[0-9]+$ && $replicas =~ ^[0-9]+(,[0-9]+)*$ ]] \
      || fail "usage: stack.sh reassign TOPIC PARTITION BROKER[,BROKER...]"
    kafka_java "$ROOT/stack/kafka/Reassign.java" "$(bootstrap_servers "$(brokers_configured)")" \
      "$topic" "$partition" "$replicas" 2>&1 | grep -v '^SLF4J' ;;
  delete-offsets)
    # Delete a group's committed offsets (kafka-consumer-groups.sh --delete-offsets): the lab's
    # operator deleting them while the group has no member (stack/kafka/DeleteOffsets.java).
    group=${1:-}; topic=${2:-}; partitions=${3:-}
    [[ -n $group && -n $topic && $partitions =~ ^[0-9]+(,[0-9]+)*$ ]] \
      || fail "usage: stack.sh delete-offsets GROUP TOPIC PARTITION[,PARTITION...]"
    kafka_java "$ROOT/stack/kafka/DeleteOffsets.java" "$(bootstrap_servers "$(brokers_configured)")" \
      "$group" "$topic" "$partitions" 2>&1 | grep -v '^SLF4J' ;;
  *) echo "usage: stack/stack.sh up [--brokers 1|3] | down | status | broker stop|kill|start|pause|resume|pid ID | reassign TOPIC PARTITION BROKERS | delete-offsets GROUP TOPIC PARTITIONS" >&2; exit 2 ;;
esac
