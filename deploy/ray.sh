#!/usr/bin/env bash
# Start / stop a throwaway local Ray cluster for tests and demos (no systemd; stopped by PID).
#   deploy/ray.sh start                      -> prints the dashboard URL on stdout (and nothing else)
#   deploy/ray.sh add-node NAME RESOURCES_JSON [LABELS]
#                                            -> another raylet on this host joining the head; RESOURCES_JSON
#                                               may hold "CPU" (default 1) and "GPU" (no real GPU needed),
#                                               LABELS is Ray's "k1=v1,k2=v2"
#   deploy/ray.sh remove-node NAME
#   deploy/ray.sh stop                       -> every process this script started, by PID
#   deploy/ray.sh url | status
# Facts used: ../shared/reference/real-backends.md (never `ray stop`: it kills every Ray
# process on the machine by name; ready when /api/version answers; the job entrypoint's
# `python` is the first on the PATH of `ray start`; unplaceable jobs wait for
# RAY_JOB_START_TIMEOUT_SECONDS).
#
# Environment:
#   HETPOOL_VENV                 venv that has (or gets) ray[default]   (default: <repo>/.venv)
#   HETPOOL_RAY_DIR              pid files, logs and Ray's temp dir     (default: /tmp/hetpool-ray)
#   HETPOOL_RAY_PORT             GCS port of the head                   (default: 16379)
#   HETPOOL_RAY_DASHBOARD_PORT   dashboard, bound to 127.0.0.1          (default: 8265)
#   HETPOOL_RAY_RESOURCES        head's custom resources (JSON)         (default below)
#   HETPOOL_RAY_NUM_GPUS         head's built-in GPU count, no real GPU needed (default: 0)
#   HETPOOL_RAY_START_TIMEOUT    seconds to wait for the dashboard      (default: 90)
#   HETPOOL_RAY_ENV_PASSTHROUGH  names of the caller's variables Ray may keep (default: none); Ray is
#                                started with `env -i`: PATH, HOME, LANG, LC_*, TZ, TMPDIR, RAY_* only
#
# Resource naming (what src/hetpool/connectors/ray.py maps onto catalog models):
# "<CLASS>_<PRODUCT>" (GPU_H100, NPU_910B3) or a catalog model name (ascend-910b3).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${HETPOOL_VENV:-$REPO/.venv}"
BASE="${HETPOOL_RAY_DIR:-/tmp/hetpool-ray}"
PORT="${HETPOOL_RAY_PORT:-16379}"
DASH_PORT="${HETPOOL_RAY_DASHBOARD_PORT:-8265}"
# Unambiguous catalog products, so tests can assert models without overrides.
DEFAULT_RESOURCES='{"GPU_H100": 4, "NPU_910B3": 8}'
RESOURCES="${HETPOOL_RAY_RESOURCES:-$DEFAULT_RESOURCES}"
NUM_GPUS="${HETPOOL_RAY_NUM_GPUS:-0}"
START_TIMEOUT="${HETPOOL_RAY_START_TIMEOUT:-90}"
URL="http://127.0.0.1:$DASH_PORT"
PIDS="$BASE/pids"
# ~100 MB object store per raylet: the tests move no data, and the default (30% of RAM) is wasteful.
OBJECT_STORE=$((100 * 1024 * 1024))

log() { echo "ray: $*" >&2; }

install_if_missing() {
  [ -x "$VENV/bin/python" ] || { log "no venv at $VENV (set HETPOOL_VENV)"; exit 1; }
  if ! "$VENV/bin/python" -c 'import ray, ray.dashboard' >/dev/null 2>&1; then
    log "installing ray[default] into $VENV"
    # The version the connector was tested with (the dashboard's JSON is not a stable API).
    "$VENV/bin/pip" install -q 'ray[default]>=2.60,<3' >&2
  fi
}

# "pid starttime" — the start time (field 22 of /proc/PID/stat) tells a reused PID apart.
proc_id() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
  stat=${stat##*) }  # the command name may contain spaces; fields restart after ") "
  # shellcheck disable=SC2086
  set -- $stat
  # A zombie has exited; it lingers until its parent (here often PID 1) reaps it.
  case "$1" in Z | X) return 1 ;; esac
  echo "${20}"
}

alive() {  # alive PID STARTTIME
  local st
  st=$(proc_id "$1") || return 1
  [ "$st" = "$2" ]
}

descendants() {  # every descendant PID of $1, depth first
  local child
  for child in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
    echo "$child"
    descendants "$child"
  done
}

env_for_ray() {
  # The venv first, so `ray` and job entrypoints' `python` are the venv's.
  export PATH="$VENV/bin:$PATH"
  export RAY_USAGE_STATS_ENABLED=0
  # A job that can never be placed fails after this instead of hanging for 15 minutes.
  export RAY_JOB_START_TIMEOUT_SECONDS="${RAY_JOB_START_TIMEOUT_SECONDS:-30}"
  # Ray >= 2.5x drains a node on SIGTERM and waits (default 30 s) until its workers are
  # gone; a busy node then outlives our grace period, gets SIGKILLed and is only marked
  # DEAD by the GCS health check ~15 s later. A throwaway cluster has nothing to quiesce.
  export RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S="${RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S:-0}"
  # A stopped job (a cancel, or a preempted checkpointable task) gets SIGTERM and is killed
  # this long after: Ray's default (3 s) is too short to write a checkpoint.
  export RAY_JOB_STOP_WAIT_TIME_S="${RAY_JOB_STOP_WAIT_TIME_S:-30}"
  # The autoscaler monitor writes the per-node load report (what the connector reads as
  # "used") every 5 s by default; 1 s keeps tests short at a negligible cost.
  export AUTOSCALER_UPDATE_INTERVAL_S="${AUTOSCALER_UPDATE_INTERVAL_S:-1}"
}

clean_env() {  # NAME=VALUE words for `env -i`: what a Ray node may pass on to every job
  local v
  local -a keep=("PATH=$PATH" "HOME=${HOME:-/nonexistent}" "LANG=${LANG:-C.UTF-8}")
  # shellcheck disable=SC2086
  for v in $(compgen -e); do
    case "$v" in
      RAY_* | AUTOSCALER_* | LC_* | TZ | TMPDIR) keep+=("$v=${!v}") ;;
      *) for p in ${HETPOOL_RAY_ENV_PASSTHROUGH:-}; do [ "$v" = "$p" ] && keep+=("$v=${!v}"); done ;;
    esac
  done
  printf '%s\0' "${keep[@]}"
}

launch() {  # launch NAME LOGFILE ARGS... : start `ray start --block ARGS` detached, record its PID
  local name=$1 logfile=$2; shift 2
  env_for_ray
  # A clean environment: Ray's workers (every job's entrypoint, every task of a job) inherit the
  # raylet's, so nothing of the caller's shell (HETPOOL_DATABASE_URL, cloud credentials, tokens)
  # may go into `ray start`. HETPOOL_RAY_ENV_PASSTHROUGH="NAME ..." keeps more (e.g. LD_LIBRARY_PATH).
  local -a environment
  mapfile -d '' environment < <(clean_env)
  # setsid + no inherited stdout: `url=$(deploy/ray.sh start)` must not wait for Ray to exit.
  setsid env -i "${environment[@]}" "$VENV/bin/ray" start --block "$@" </dev/null >"$logfile" 2>&1 &
  local pid=$!
  echo "$pid $(proc_id "$pid")" >"$PIDS/$name.pid"
}

head_alive() {
  [ -f "$PIDS/head.pid" ] || return 1
  # shellcheck disable=SC2046
  alive $(cat "$PIDS/head.pid")
}

dashboard_up() { curl -fsS -m 2 "$URL/api/version" >/dev/null 2>&1; }

# /api/version answers a few seconds before the head is listed by the state API and before
# the autoscaler's first load report (per-node use): wait for both, so a first fetch is whole.
cluster_ready() {
  "$VENV/bin/python" - "$URL" <<'PY' >/dev/null 2>&1
import json, sys, urllib.request
def get(path):
    with urllib.request.urlopen(sys.argv[1] + path, timeout=2) as r:
        return json.load(r)
nodes = get("/api/v0/nodes?limit=100")["data"]["result"]["result"]
alive = {n["node_id"] for n in nodes if n["state"] == "ALIVE"}
usage = ((get("/api/cluster_status")["data"].get("clusterStatus") or {}).get("loadMetricsReport") or {}).get("usageByNode") or {}
sys.exit(0 if alive and alive <= set(usage) else 1)
PY
}

start() {
  mkdir -p "$PIDS"
  # Also when a head is already up (started from another checkout): `add-node` runs this
  # checkout's `ray`.
  install_if_missing
  if head_alive && dashboard_up && cluster_ready; then
    echo "$URL"
    return
  fi
  local t0=$SECONDS
  if ! head_alive; then  # else a head is starting (another caller): just wait for it below
    stop_all 2>/dev/null || true
    # Old sessions' logs (tens of MB each) are of no use once their processes are gone.
    rm -rf "$BASE/tmp"
    install_if_missing
    start_head
  fi
  until dashboard_up && cluster_ready; do
    if ! head_alive; then log "head exited; log:"; tail -n 40 "$BASE/head.log" >&2; exit 1; fi
    if [ $((SECONDS - t0)) -ge "$START_TIMEOUT" ]; then log "dashboard not up after ${START_TIMEOUT}s"; tail -n 40 "$BASE/head.log" >&2; exit 1; fi
    sleep 0.5
  done
  log "head up in $((SECONDS - t0))s at $URL (GCS 127.0.0.1:$PORT)"
  echo "$URL"
}

start_head() {
  launch head "$BASE/head.log" --head \
    --port="$PORT" --ray-client-server-port=$((PORT + 1)) \
    --dashboard-host=127.0.0.1 --dashboard-port="$DASH_PORT" \
    --num-cpus=2 --num-gpus="$NUM_GPUS" --resources="$RESOURCES" \
    --object-store-memory="$OBJECT_STORE" \
    --min-worker-port=0 --max-worker-port=0 \
    --node-name=hetpool-ray-head \
    --temp-dir="$BASE/tmp" --disable-usage-stats
  # Worker ports: 0 = ephemeral ports from the OS, so Ray never takes a fixed port that a
  # service started beside it (e.g. Slurm's) expects.
}

free_port() { "$VENV/bin/python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

split_resources() {  # JSON -> "cpus gpus rest-json": Ray wants CPU / GPU as flags, not in --resources
  "$VENV/bin/python" -c '
import json, sys
r = json.loads(sys.argv[1] or "{}")
cpu, gpu = r.pop("CPU", 1), r.pop("GPU", 0)
print(int(cpu), int(gpu), json.dumps(r, separators=(",", ":")))' "$1"
}

add_node() {
  local name=${1:?usage: add-node NAME RESOURCES_JSON [LABELS]} resources=${2:-"{}"} labels=${3:-} cpus gpus rest
  case "$name" in head | *[!A-Za-z0-9._-]*) log "bad node name: $name"; exit 2 ;; esac
  head_alive || { log "no head running (deploy/ray.sh start first)"; exit 1; }
  install_if_missing
  if [ -f "$PIDS/node-$name.pid" ]; then
    # shellcheck disable=SC2046
    alive $(cat "$PIDS/node-$name.pid") && { log "node $name already running"; return; }
  fi
  read -r cpus gpus rest < <(split_resources "$resources") || { log "bad RESOURCES_JSON: $resources"; exit 2; }
  # A second raylet on the same host needs its own dashboard-agent port (default 52365 is the head's).
  launch "node-$name" "$BASE/node-$name.log" \
    --address="127.0.0.1:$PORT" --node-name="$name" \
    --num-cpus="$cpus" --num-gpus="$gpus" --resources="$rest" --labels="$labels" \
    --object-store-memory="$OBJECT_STORE" \
    --min-worker-port=0 --max-worker-port=0 \
    --dashboard-agent-listen-port="$(free_port)" \
    --disable-usage-stats
  log "node $name starting (pid $(cut -d' ' -f1 "$PIDS/node-$name.pid"))"
}

session_members() {  # session_members SID STARTTIME: "pid starttime" of processes in session SID started since
  local f stat p
  for f in /proc/[0-9]*/stat; do
    read -r stat 2>/dev/null <"$f" || continue
    stat=${stat##*) }
    # shellcheck disable=SC2086
    set -- $stat
    # After ") ": state ppid pgrp session ... starttime (field 20).
    if [ "$4" = "$SID_WANTED" ] && [ "${20}" -ge "$ST_WANTED" ] && [ "$1" != Z ]; then
      p=${f#/proc/}; echo "${p%/stat} ${20}"
    fi
  done
}

stop_pidfile() {  # stop_pidfile FILE [GRACE_S]: SIGTERM the --block process, SIGKILL its leftovers
  local file=$1 grace=${2:-10} pid st p s i any deadline
  [ -f "$file" ] || return 0
  read -r pid st <"$file"
  # Snapshot the processes first: once `ray start` exits its children are reparented. They are
  # its descendants and, since it was started with setsid, its session (which also finds
  # children orphaned by an earlier crash of `ray start` itself).
  local -a procs=() proc_st=()
  if alive "$pid" "$st"; then
    for p in $(descendants "$pid"); do
      if s=$(proc_id "$p"); then procs+=("$p"); proc_st+=("$s"); fi
    done
  fi
  while read -r p s; do
    [ -n "$p" ] && [ "$p" != "$pid" ] && { procs+=("$p"); proc_st+=("$s"); }
  done < <(SID_WANTED=$pid ST_WANTED=$st session_members)
  if alive "$pid" "$st"; then
    kill -TERM "$pid" 2>/dev/null || true
  else
    # The leader is gone: its leftovers get the SIGTERM (`ray start` would have sent it).
    for i in "${!procs[@]}"; do alive "${procs[$i]}" "${proc_st[$i]}" && kill -TERM "${procs[$i]}" 2>/dev/null; done
  fi
  deadline=$((SECONDS + grace))
  while :; do
    any=0
    alive "$pid" "$st" && any=1
    for i in "${!procs[@]}"; do alive "${procs[$i]}" "${proc_st[$i]}" && any=1; done
    [ $any = 0 ] && break
    [ $SECONDS -ge $deadline ] && break
    sleep 0.2
  done
  alive "$pid" "$st" && kill -KILL "$pid" 2>/dev/null
  for i in "${!procs[@]}"; do
    alive "${procs[$i]}" "${proc_st[$i]}" && kill -KILL "${procs[$i]}" 2>/dev/null
  done
  rm -f "$file"
}

remove_node() {
  local name=${1:?usage: remove-node NAME}
  [ -f "$PIDS/node-$name.pid" ] || { log "no node $name"; return 0; }
  stop_pidfile "$PIDS/node-$name.pid"
  log "node $name stopped"
}

stop_all() {
  local f
  # Worker raylets first (the head going first would leave them retrying the GCS).
  for f in "$PIDS"/node-*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
  stop_pidfile "$PIDS/head.pid"
  return 0
}

status() {
  local f
  for f in "$PIDS"/*.pid; do
    [ -e "$f" ] || continue
    # shellcheck disable=SC2046
    if alive $(cat "$f"); then echo "$(basename "$f" .pid) running pid $(cut -d' ' -f1 "$f")"; else echo "$(basename "$f" .pid) dead"; fi
  done
}

case "${1:-start}" in
  start) start ;;
  add-node) add_node "${2:-}" "${3:-}" "${4:-}" ;;
  remove-node) remove_node "${2:-}" ;;
  stop) stop_all; log "stopped" ;;
  url) echo "$URL" ;;
  status) status ;;
  *) echo "usage: $0 start|stop|add-node NAME RESOURCES_JSON [LABELS]|remove-node NAME|url|status" >&2; exit 2 ;;
esac
