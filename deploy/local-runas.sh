#!/usr/bin/env bash
# What the local backend needs to run tasks as identities other than the server's
# (docs/backends.md, "Who a task runs as"). Idempotent; says what it did on stderr.
#
#   deploy/local-runas.sh                 root server (the default): the task root parent
#                                         /var/lib/hetpool/tasks (root, 0711) — tasks get a
#                                         dynamic uid each, no account needed — plus the
#                                         named user `hetpool-task` (nologin, no home) for
#                                         clusters that set run_as_user: hetpool-task
#   deploy/local-runas.sh user NAME       another named task user (e.g. per tenant: run_as_tenants)
#   deploy/local-runas.sh sudo SERVER_USER [TASK_USER[,TASK_USER...]]
#                                         a server that is NOT root: the task users, a task
#                                         root /var/lib/hetpool/tasks-SERVER_USER (1730,
#                                         SERVER_USER:hetpool-tasks) and /etc/sudoers.d/hetpool-SERVER_USER
#                                         allowing SERVER_USER to start the launcher as them
#
# HETPOOL_PYTHON: the server's python (default: this checkout's .venv/bin/python); the
# sudoers line names it exactly, as the server runs it.
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON="${HETPOOL_PYTHON:-$REPO/.venv/bin/python}"
TASKS_GROUP=hetpool-tasks
DEFAULT_USER=hetpool-task
NOLOGIN=$(command -v nologin || echo /usr/sbin/nologin)

say() { echo "local-runas: $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then
    say "not root: nothing changed. A server that is not root needs (as root): $0 sudo $(id -un)"
    exit 0
  fi
}

ensure_dir() {  # path owner group mode
  local path=$1 owner=$2 group=$3 mode=$4
  if [ ! -d "$path" ]; then
    mkdir -p "$path"
    say "created $path"
  fi
  if [ "$(stat -c '%U:%G %a' "$path")" != "$owner:$group $mode" ]; then
    chown "$owner:$group" "$path"
    chmod "$mode" "$path"
    say "$path is now $owner:$group mode $mode"
  fi
}

ensure_group() {
  if ! getent group "$1" >/dev/null; then
    groupadd --system "$1"
    say "created group $1"
  fi
}

ensure_user() {  # an account that cannot log in and has no home; never root's group
  local name=$1
  ensure_group "$TASKS_GROUP"
  if ! getent passwd "$name" >/dev/null; then
    # Not --system: Slurm clusters refuse accounts under uid 1000 (engines/slurm/runas.py), and
    # deploy/slurm-accounts.sh makes this same account with these same flags.
    useradd --no-create-home --home-dir /nonexistent --shell "$NOLOGIN" --user-group "$name"
    say "created user $name (uid $(id -u "$name"), shell $NOLOGIN, no home)"
  fi
  if ! id -nG "$name" | tr ' ' '\n' | grep -qx "$TASKS_GROUP"; then
    usermod -a -G "$TASKS_GROUP" "$name"
    say "added $name to group $TASKS_GROUP"
  fi
}

default_setup() {
  need_root
  ensure_dir /var/lib/hetpool root root 755
  ensure_dir /var/lib/hetpool/tasks root root 711
  ensure_user "$DEFAULT_USER"
}

sudo_setup() {
  local server=$1 users=${2:-$DEFAULT_USER}
  need_root
  getent passwd "$server" >/dev/null || { say "no user $server"; exit 2; }
  [ "$(id -u "$server")" != 0 ] || { say "$server is root: a root server needs no sudo (run $0 without arguments)"; exit 2; }
  if ! command -v sudo >/dev/null || ! command -v visudo >/dev/null; then
    say "installing Debian's sudo package"
    # A fresh machine may have no package lists yet: update once if the first try fails.
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends sudo >&2 \
      || { apt-get -o DPkg::Lock::Timeout=300 update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 install -y -qq --no-install-recommends sudo >&2; }
  fi
  local u
  for u in ${users//,/ }; do
    [ "$u" != "$server" ] || { say "the task user must not be the server user ($server)"; exit 2; }
    ensure_user "$u"
  done
  ensure_dir /var/lib/hetpool root root 755
  # Task users create their own 0700 directories here (sudo mode: the server cannot chown);
  # sticky, and no read for the group: nobody lists or removes another task's directory.
  ensure_dir "/var/lib/hetpool/tasks-$server" "$server" "$TASKS_GROUP" 1730
  local file="/etc/sudoers.d/hetpool-$server" tmp
  tmp=$(mktemp)
  {
    echo "# written by hetpool deploy/local-runas.sh: $server starts hetpool tasks as ${users//,/, }"
    echo "Defaults:$server !requiretty, !use_pty"
    echo "$server ALL=(${users//,/, }) NOPASSWD: $PYTHON -I -m hetpool.engines.local.launch *"
  } >"$tmp"
  if visudo -cqf "$tmp"; then
    if ! cmp -s "$tmp" "$file" 2>/dev/null; then
      install -m 440 -o root -g root "$tmp" "$file"
      say "wrote $file"
    fi
    rm -f "$tmp"
  else
    rm -f "$tmp"
    say "visudo refused the sudoers line; nothing written"
    exit 1
  fi
  say "backend_config for the server's local clusters: run_as_user: ${users%%,*}, task_root: /var/lib/hetpool/tasks-$server"
}

case "${1:-default}" in
  default) default_setup ;;
  user) [ -n "${2:-}" ] || { say "usage: $0 user NAME"; exit 2; }; need_root; ensure_user "$2" ;;
  sudo) [ -n "${2:-}" ] || { say "usage: $0 sudo SERVER_USER [TASK_USER,...]"; exit 2; }; sudo_setup "$2" "${3:-}" ;;
  *) say "usage: $0 [default | user NAME | sudo SERVER_USER [TASK_USER,...]]"; exit 2 ;;
esac
