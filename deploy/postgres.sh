#!/usr/bin/env bash
# Start / stop a throwaway PostgreSQL for tests and demos (no systemd; stopped by its own pg_ctl).
#   deploy/postgres.sh start   -> prints the SQLAlchemy URL (with the password) on stdout
#   deploy/postgres.sh stop
#   deploy/postgres.sh url
#   deploy/postgres.sh pid     -> the postmaster's pid (the crash test kill -9s it)
# Facts used: ../shared/reference/real-backends.md (initdb refuses root; data dir must be
# traversable by the postgres user, so it lives under /tmp, not /root).
#
# Password auth (scram-sha-256) on TCP, never `trust`: any local process — a hetpool task
# included — can reach 127.0.0.1, so the port alone must not let it in. The generated
# password is in $BASE/password (mode 600, owned by whoever started the server; $BASE is
# 700). The local socket keeps peer auth: only the postgres OS user gets in that way.
# A data dir made by an older version of this script (trust) is switched over on start.
set -euo pipefail

PORT="${HETPOOL_PG_PORT:-55432}"
BASE="${HETPOOL_PG_DIR:-/tmp/hetpool-pg-$PORT}"
DB="${HETPOOL_PG_DB:-hetpool}"
PWFILE="$BASE/password"
START_WAIT_S="${HETPOOL_PG_START_WAIT_S:-300}"
# A server that outlasted pg_ctl's wait and is still replaying its WAL is waited for this
# much longer (as long as its postmaster lives): a replay's length follows the WAL and the
# machine's load, not pg_ctl's wait (with the latter at 1 s, a loaded machine's 2 s replay
# made a start fail).
RECOVERY_WAIT_S="${HETPOOL_PG_RECOVERY_WAIT_S:-600}"

find_bin() {
  # Debian keeps the server binaries (initdb, pg_ctl, psql, createdb together) here.
  local d
  d=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$d" ] && [ -x "$d/pg_ctl" ] && { echo "$d"; return; }
  return 1
}

install_if_missing() {
  if ! find_bin >/dev/null; then
    echo "postgres: installing Debian's postgresql package" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2 && apt-get install -y -qq --no-install-recommends postgresql >&2
  fi
}

as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

password() {
  # Letters and digits only: it goes into a URL unescaped.
  if [ ! -s "$PWFILE" ]; then
    (umask 077; head -c 64 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 32 >"$PWFILE.tmp")
    mv "$PWFILE.tmp" "$PWFILE"
    echo "postgres: generated the superuser password in $PWFILE (mode 600)" >&2
  fi
  chmod 600 "$PWFILE"
  cat "$PWFILE"
}

url() {
  echo "postgresql+psycopg://postgres:$(password)@127.0.0.1:$PORT/$DB"
}

write_hba() {
  # TCP: password only. Socket: peer (the postgres OS user) when started as root.
  local hba="$BASE/data/pg_hba.conf" local_auth=peer
  [ "$(id -u)" = 0 ] || local_auth=scram-sha-256
  printf '%s\n' \
    '# written by hetpool deploy/postgres.sh: no trust anywhere' \
    "local all all $local_auth" \
    'host all all 127.0.0.1/32 scram-sha-256' \
    'host all all ::1/128 scram-sha-256' >"$hba.tmp"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$hba.tmp"
  chmod 600 "$hba.tmp"
  mv "$hba.tmp" "$hba"
}

postmaster_alive() {
  # The postmaster of postmaster.pid runs (a zombie does not: where nothing reaps a killed
  # postmaster, pg_ctl status still calls it running, and its lock file blocks a new one).
  local pid state
  pid=$(head -n 1 "$BASE/data/postmaster.pid" 2>/dev/null) || return 1
  state=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

wait_ready() {
  # A started server accepting connections within RECOVERY_WAIT_S (its recovery may be long).
  local bin=$1 waited=0
  until as_postgres "$bin/pg_isready" -q -h 127.0.0.1 -p "$PORT"; do
    postmaster_alive || return 1
    [ "$waited" -ge "$RECOVERY_WAIT_S" ] && return 1
    sleep 1
    waited=$((waited + 1))
  done
}

psql_tcp() {
  # The password goes in by environment (never on a command line, where ps shows it).
  local bin=$1; shift
  PGPASSWORD=$(password) as_postgres "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres "$@"
}

start() {
  install_if_missing
  local bin; bin=$(find_bin)
  mkdir -p "$BASE"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$BASE"
  chmod 700 "$BASE"  # the password file and the socket: not for tasks
  password >/dev/null
  if [ ! -f "$BASE/data/PG_VERSION" ]; then
    (umask 077; password >"$BASE/.pwinit")
    [ "$(id -u)" = 0 ] && chown postgres "$BASE/.pwinit"
    as_postgres "$bin/initdb" -D "$BASE/data" -U postgres --pwfile="$BASE/.pwinit" --auth-host=scram-sha-256 \
      --auth-local="$([ "$(id -u)" = 0 ] && echo peer || echo scram-sha-256)" -E UTF8 --no-sync >"$BASE/initdb.log" 2>&1 \
      || { rm -f "$BASE/.pwinit"; cat "$BASE/initdb.log" >&2; exit 1; }
    rm -f "$BASE/.pwinit"
  fi
  # Tests run without durability (fsync, synchronous_commit and full_page_writes off): a test
  # database need not survive a crash. HETPOOL_PG_DURABLE=1 keeps PostgreSQL's defaults, as
  # a production server has them: what the benchmarks measure and the crash test kills.
  local durability="-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  [ "${HETPOOL_PG_DURABLE:-0}" = 1 ] && durability="-c fsync=on -c synchronous_commit=on -c full_page_writes=on"
  if ! as_postgres "$bin/pg_ctl" -D "$BASE/data" status >/dev/null 2>&1; then
    # After a kill -9 the old backends may still hold the shared memory for a moment: retry.
    # After a crash or an immediate stop the server first replays its WAL, which after a
    # whole test suite took ~60 s (pg_ctl's default wait): allow START_WAIT_S, and a server
    # that is already up but still recovering is waited for, not started a second time
    # (that only fails on its lock file).
    local try
    for try in $(seq 1 20); do
      as_postgres "$bin/pg_ctl" -D "$BASE/data" -w -t "$START_WAIT_S" -l "$BASE/server.log" \
        -o "-k $BASE -h 127.0.0.1 -p $PORT $durability -c max_connections=200 -c password_encryption=scram-sha-256" \
        start >&2 && break
      if postmaster_alive; then
        wait_ready "$bin" && break
        tail -n 30 "$BASE/server.log" >&2
        exit 1
      fi
      [ "$try" = 20 ] && { tail -n 30 "$BASE/server.log" >&2; exit 1; }
      sleep 1
    done
  fi
  if grep -qE '^[^#]*[[:space:]]trust([[:space:]]|$)' "$BASE/data/pg_hba.conf"; then
    # Made by an older version of this script: set the password while trust still lets us
    # in (stdin, not a command line), then allow only password auth on TCP.
    echo "postgres: $BASE/data allowed trust auth; switching it to scram-sha-256" >&2
    printf "ALTER USER postgres PASSWORD '%s';\n" "$(password)" | psql_tcp "$bin" -q -d postgres -v ON_ERROR_STOP=1 >/dev/null
    write_hba
    as_postgres "$bin/pg_ctl" -D "$BASE/data" reload >&2
  fi
  if ! psql_tcp "$bin" -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    psql_tcp "$bin" -d postgres -q -c "CREATE DATABASE \"$DB\""
  fi
  url
}

stop() {
  local bin; bin=$(find_bin) || exit 0
  if [ -f "$BASE/data/postmaster.pid" ]; then
    # A fast (clean) shutdown writes a checkpoint, so the next start has no WAL to replay;
    # immediate only if that does not finish in a minute.
    as_postgres "$bin/pg_ctl" -D "$BASE/data" -m fast -t 60 stop >&2 \
      || as_postgres "$bin/pg_ctl" -D "$BASE/data" -m immediate stop >&2 || true
  fi
}

pid() {
  head -n 1 "$BASE/data/postmaster.pid" 2>/dev/null || { echo "postgres: not running" >&2; exit 1; }
}

case "${1:-start}" in
  start) start ;;
  pid) pid ;;
  stop) stop ;;
  url) url ;;
  *) echo "usage: $0 start|stop|url|pid" >&2; exit 2 ;;
esac
