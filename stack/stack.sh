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
KAFKA_PORT=$((9092 + PORT_BASE)); CONTROLLER_PORT=$((9192 + PORT_BASE))
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
listeners=PLAINTEXT://127.0.0.1:$((KAFKA_PORT + id - 1)),CONTROLLER://127.0.0.1:$((CONTROLLER_PORT + id - 1))
advertised.listeners=PLAINTEXT://127.0.0.1:$((KAFKA_PORT + id - 1))
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
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
  for ((i = 1; i <= n; i++)); do kafka_start_one "$i"; done
  for ((i = 1; i <= n; i++)); do
    wait_for "Kafka broker $i" 90 "$VAR/kafka/$i/broker.log" kafka_ready "$i"
  done
  wait_for "Kafka cluster ($n brokers)" 90 "$VAR/kafka/1/broker.log" \
    "$ROOT/.venv/bin/python" "$ROOT/stack/ready.py" kafka "$(bootstrap_servers "$n")" "$n"
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

kafka_stop_one() {  # id signal
  local dir="$VAR/kafka/$1" sig=${2:-TERM} pid
  pid_alive "$dir/pid" || { rm -f "$dir/pid"; return 0; }
  pid=$(cat "$dir/pid")
  kill -"$sig" "$pid" 2>/dev/null || true
  for _ in $(seq 1 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
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
  # shellcheck disable=SC1090
  . "$cred"
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
      echo "kafka-$i    up    127.0.0.1:$((KAFKA_PORT + i - 1))"
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
  *) echo "usage: stack/stack.sh up [--brokers 1|3] | down | status | broker stop|kill|start|pause|resume|pid ID" >&2; exit 2 ;;
esac
