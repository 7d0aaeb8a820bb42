#!/usr/bin/env bash
# Start / stop a throwaway PostgreSQL for tests and demos (no systemd; stopped by its own pg_ctl).
#   deploy/postgres.sh start   -> prints the SQLAlchemy URL on stdout
#   deploy/postgres.sh stop
#   deploy/postgres.sh url
# Facts used: ../shared/reference/real-backends.md (initdb refuses root; data dir must be
# traversable by the postgres user, so it lives under /tmp, not /root).
set -euo pipefail

PORT="${HETPOOL_PG_PORT:-55432}"
BASE="${HETPOOL_PG_DIR:-/tmp/hetpool-pg-$PORT}"
DB="${HETPOOL_PG_DB:-hetpool}"
URL="postgresql+psycopg://postgres@127.0.0.1:$PORT/$DB"

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

start() {
  install_if_missing
  local bin; bin=$(find_bin)
  mkdir -p "$BASE"
  [ "$(id -u)" = 0 ] && chown postgres:postgres "$BASE"
  if [ ! -f "$BASE/data/PG_VERSION" ]; then
    as_postgres "$bin/initdb" -D "$BASE/data" -U postgres -A trust -E UTF8 --no-sync >"$BASE/initdb.log" 2>&1 \
      || { cat "$BASE/initdb.log" >&2; exit 1; }
  fi
  if ! as_postgres "$bin/pg_ctl" -D "$BASE/data" status >/dev/null 2>&1; then
    as_postgres "$bin/pg_ctl" -D "$BASE/data" -w -l "$BASE/server.log" \
      -o "-k $BASE -h 127.0.0.1 -p $PORT -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200" \
      start >&2 || { cat "$BASE/server.log" >&2; exit 1; }
  fi
  if ! as_postgres "$bin/psql" -h 127.0.0.1 -p "$PORT" -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname='$DB'" | grep -q 1; then
    as_postgres "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U postgres "$DB"
  fi
  echo "$URL"
}

stop() {
  local bin; bin=$(find_bin) || exit 0
  if [ -f "$BASE/data/postmaster.pid" ]; then
    as_postgres "$bin/pg_ctl" -D "$BASE/data" -m immediate stop >&2 || true
  fi
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  url) echo "$URL" ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
