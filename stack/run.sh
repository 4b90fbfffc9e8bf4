#!/usr/bin/env bash
# Runs the auditor's own processes against the dev stack (make up first):
# web (Daphne), Celery worker, Celery beat, the canary and the demo pipeline, and with
# RECONCILE_RUNNER=resident the reconciler (a Celery worker with one resident Spark driver
# that runs reconciliations one at a time: auditor/reconcile/resident.py).
#   stack/run.sh start | stop | status
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
RUN="$ROOT/var/dev/run"
PY="$ROOT/.venv/bin/python"
WEB_PORT="${AUDITOR_WEB_PORT:-8000}"
mkdir -p "$RUN"
if [[ -f .env ]]; then set -a; . ./.env; set +a; fi
RECONCILE_QUEUE="${AUDITOR_CELERY_QUEUE:-celery}.reconcile"

say() { printf '\033[1m[run]\033[0m %s\n' "$*"; }
fail() { printf '[run] ERROR: %s\n' "$*" >&2; exit 1; }
pid_alive() { [[ -f $1 ]] && kill -0 "$(cat "$1")" 2>/dev/null; }

# name -> command line. The demo traffic is optional: AUDITOR_DEMO=0 leaves it out.
declare -A SERVICES=(
  [web]="$PY -m daphne -b 127.0.0.1 -p $WEB_PORT auditor.asgi:application"
  [worker]="$PY -m celery -A auditor worker --loglevel=INFO --concurrency=2 -n worker@%h"
  [reconciler]="$PY -m celery -A auditor worker --loglevel=INFO --pool=solo --concurrency=1 --without-gossip --without-mingle -n reconciler@%h -Q $RECONCILE_QUEUE"
  [beat]="$PY -m celery -A auditor beat --loglevel=INFO"
  [canary]="$PY manage.py audit canary"
  [demo]="$PY manage.py audit demo run"
)
ORDER=(web worker)
[[ ${RECONCILE_RUNNER:-submit} != resident ]] || ORDER+=(reconciler)
ORDER+=(beat canary)
[[ ${AUDITOR_DEMO:-1} == 0 ]] || ORDER+=(demo)

stop_one() {
  local name=$1 pidf="$RUN/$1.pid" pid
  pid_alive "$pidf" || { rm -f "$pidf"; return 0; }
  pid=$(cat "$pidf")
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  rm -f "$pidf"
}

start_one() {
  local name=$1
  pid_alive "$RUN/$name.pid" && stop_one "$name"
  setsid bash -c "exec ${SERVICES[$name]}" >>"$RUN/$name.log" 2>&1 < /dev/null &
  echo $! >"$RUN/$name.pid"
}

case "${1:-status}" in
  start)
    [[ -f .env ]] || fail ".env is missing: run 'make up' first"
    case "${RECONCILE_RUNNER:-submit}" in
      submit | resident) ;;
      *) fail "RECONCILE_RUNNER: '${RECONCILE_RUNNER}' is not one of submit, resident" ;;
    esac
    say "migrating the database"
    $PY manage.py migrate --noinput >"$RUN/migrate.log" 2>&1 || fail "migrations failed; see $RUN/migrate.log"
    $PY manage.py collectstatic --noinput >"$RUN/collectstatic.log" 2>&1 || fail "collectstatic failed; see $RUN/collectstatic.log"
    $PY manage.py ensure_admin --username admin >/dev/null || fail "could not create the admin user"
    if [[ -f demo/auditor.yaml ]]; then
      $PY manage.py audit apply demo/auditor.yaml >"$RUN/apply.log" 2>&1 || fail "demo config did not apply; see $RUN/apply.log"
    fi
    if [[ ${AUDITOR_DEMO:-1} != 0 ]]; then
      $PY manage.py audit demo setup >"$RUN/demo-setup.log" 2>&1 || fail "demo setup failed; see $RUN/demo-setup.log"
    fi
    if (exec 3<>"/dev/tcp/127.0.0.1/$WEB_PORT") 2>/dev/null && ! pid_alive "$RUN/web.pid"; then
      fail "web: port $WEB_PORT is already taken by another process (set AUDITOR_WEB_PORT)"
    fi
    for name in "${ORDER[@]}"; do say "starting $name (log: var/dev/run/$name.log)"; start_one "$name"; done
    for _ in $(seq 1 60); do
      curl -fsS -o /dev/null "http://127.0.0.1:$WEB_PORT/login/" 2>/dev/null && break
      pid_alive "$RUN/web.pid" || fail "web exited during start-up; see $RUN/web.log"
      sleep 0.5
    done
    curl -fsS -o /dev/null "http://127.0.0.1:$WEB_PORT/login/" || fail "web did not answer on port $WEB_PORT; see $RUN/web.log"
    echo
    say "the auditor is running at http://127.0.0.1:$WEB_PORT/"
    say "log in as: admin / $AUDITOR_ADMIN_PASSWORD"
    say "stop it with: make stop (app only) or make down (everything)"
    ;;
  stop)
    for name in demo canary beat reconciler worker web; do stop_one "$name"; done
    say "auditor processes stopped"
    ;;
  status)
    # a reconciler started under another RECONCILE_RUNNER is still shown
    [[ " ${ORDER[*]} " == *" reconciler "* ]] || ! pid_alive "$RUN/reconciler.pid" || ORDER+=(reconciler)
    for name in "${ORDER[@]}"; do
      if pid_alive "$RUN/$name.pid"; then echo "$name   up    (log: var/dev/run/$name.log)"; else echo "$name   down"; fi
    done
    ;;
  *) echo "usage: stack/run.sh start|stop|status" >&2; exit 2 ;;
esac
