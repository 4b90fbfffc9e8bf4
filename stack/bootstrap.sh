#!/usr/bin/env bash
# Installs everything the auditor needs on a fresh Debian machine: Debian packages,
# the Python virtualenv, and the Maven artifacts (Kafka broker, Spark's Kafka source,
# PostgreSQL JDBC). Idempotent: each step is skipped when its inputs did not change.
#   stack/bootstrap.sh [--with-browser] [--with-old-clients]
# make test passes both: Chromium (and a compose client) for the browser tests, and older
# kafka-clients jars for the config lint's start-up tests.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
CACHE="$ROOT/.cache"
mkdir -p "$CACHE"
WITH_BROWSER=0
WITH_OLD_CLIENTS=0

say() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*"; }
die() { printf '[bootstrap] ERROR: %s\n' "$*" >&2; exit 1; }

for arg in "$@"; do
  case "$arg" in
    --with-browser) WITH_BROWSER=1 ;;
    --with-old-clients) WITH_OLD_CLIENTS=1 ;;
    *) die "unknown option $arg (expected --with-browser, --with-old-clients)" ;;
  esac
done

# ---- Debian packages -------------------------------------------------------------
need_pkgs=()
command -v java >/dev/null 2>&1 || need_pkgs+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || need_pkgs+=(maven)
[[ -x /usr/lib/postgresql/15/bin/postgres ]] || ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 || need_pkgs+=(postgresql)
command -v redis-server >/dev/null 2>&1 || need_pkgs+=(redis-server)
command -v curl >/dev/null 2>&1 || need_pkgs+=(curl)
command -v runuser >/dev/null 2>&1 || need_pkgs+=(util-linux)
# The probes' native produce() hot path (auditor/probes/_hotpath.c) is compiled here.
command -v cc >/dev/null 2>&1 || need_pkgs+=(gcc)
PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || need_pkgs+=(python3)
# ensurepip is what Debian splits into python3-venv; without it `-m venv` fails half-way.
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || need_pkgs+=(python3-venv)
"$PY" -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
  2>/dev/null || need_pkgs+=(python3-dev)
if [[ $WITH_BROWSER == 1 ]]; then
  command -v chromium >/dev/null 2>&1 || need_pkgs+=(chromium)
  # A compose client to check docker-compose.yml (no engine needed for `config`).
  command -v docker-compose >/dev/null 2>&1 || need_pkgs+=(docker-compose)
fi
if ((${#need_pkgs[@]})); then
  [[ $(id -u) == 0 ]] || die "missing Debian packages: ${need_pkgs[*]} (run as root or install them with apt-get)"
  say "installing Debian packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >"$CACHE/apt.log" 2>&1 || die "apt-get update failed, see $CACHE/apt.log"
  apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >>"$CACHE/apt.log" 2>&1 \
    || die "apt-get install ${need_pkgs[*]} failed, see $CACHE/apt.log"
fi
java -version 2>&1 | grep -qE 'version "(1[7-9]|2[0-9])' || die "Java 17 or newer is required (found: $(java -version 2>&1 | head -1))"

# ---- Python virtualenv -----------------------------------------------------------
if [[ ! -x .venv/bin/pip ]]; then
  say "creating .venv"
  rm -rf .venv
  "$PY" -m venv .venv || { rm -rf .venv; die "python3 -m venv failed (install python3-venv)"; }
fi
req_hash=$(cat requirements.txt requirements-dev.txt | sha256sum | cut -c1-16)
if [[ "$(cat .venv/.requirements-hash 2>/dev/null)" != "$req_hash" ]]; then
  say "installing Python packages (requirements-dev.txt: the runtime's and the tools')"
  .venv/bin/pip install -q --upgrade pip >"$CACHE/pip.log" 2>&1 || true
  .venv/bin/pip install -q -r requirements-dev.txt >>"$CACHE/pip.log" 2>&1 || die "pip install failed, see $CACHE/pip.log"
  echo "$req_hash" > .venv/.requirements-hash
fi

# ---- The probes' native hot path ---------------------------------------------------
# Optional for the probes (they fall back to pure Python), built here so the auditor and
# the tests use it; the tests fail when it is missing. Rebuilt when its source changes.
.venv/bin/python -m auditor.probes.build_native >"$CACHE/native.log" 2>&1 \
  || die "could not build the probes' native hot path, see $CACHE/native.log (needs gcc and the Python headers)"

# ---- Maven artifacts -------------------------------------------------------------
fetch_maven() {  # name pom-dir output-dir [goal: copy-dependencies, or copy for a pom's artifactItems]
  local name=$1 dir=$2 out=$3 goal=${4:-copy-dependencies} h
  h=$(sha256sum "$dir/pom.xml" stack/maven/settings.xml | sha256sum | cut -c1-16)
  if [[ "$(cat "$out/.pom-hash" 2>/dev/null)" != "$h" ]]; then
    say "resolving $name from Maven Central into $out"
    # Resolved beside the cache and swapped in whole: a pom naming something the repository
    # does not serve fails here and leaves the jars that worked where they were.
    rm -rf "$out.new"; mkdir -p "$out.new"
    (cd "$dir" && mvn -q -B -s "$ROOT/stack/maven/settings.xml" "dependency:$goal" \
        -DoutputDirectory="$out.new" -DincludeScope=runtime) >"$CACHE/mvn-$name.log" 2>&1 \
      || { rm -rf "$out.new"; die "Maven could not resolve $name, see $CACHE/mvn-$name.log ($out is as it was)"; }
    echo "$h" > "$out.new/.pom-hash"
    rm -rf "$out"; mv "$out.new" "$out"
  fi
}
fetch_maven kafka stack/maven/kafka "$CACHE/kafka/libs"
fetch_maven spark stack/maven/spark "$CACHE/spark/jars"
if [[ $WITH_OLD_CLIENTS == 1 ]]; then
  fetch_maven kafka-clients stack/maven/kafka-clients "$CACHE/kafka-clients" copy
fi
say "ready"
