#!/usr/bin/env bash
# Create the Unix accounts that hetpool's Slurm backend runs jobs as (idempotent).
#   deploy/slurm-accounts.sh            -> creates the default accounts below
#   deploy/slurm-accounts.sh NAME...    -> creates these instead
# Called by `deploy/slurm.sh start`. The accounts must exist, with the same uid/gid, on the
# host that runs sbatch (hetpool's server) and on every Slurm node: here one machine is both.
#
# Why accounts at all: a job must never run as the control plane's user (root, or the
# service account that can read hetpool's database and its secrets). Each account is an
# ordinary account (uid >= 1000: hetpool refuses system accounts such as slurm or munge)
# with its own group, no home directory and no login shell; tenants mapped to different
# accounts cannot read each other's job output (docs/backends.md#the-slurm-backend).
# The local backend's deploy script may create hetpool-task too: same flags, either wins.
#
#   hetpool-task   the default run_as_user of a Slurm cluster (backend_config.run_as_user)
#   hp-ai-lab      the demo / test mapping of tenant ai-lab   (backend_config.run_as_tenants)
#   hp-infra       the demo / test mapping of tenant infra
set -euo pipefail

ACCOUNTS=("$@")
[ ${#ACCOUNTS[@]} -gt 0 ] || ACCOUNTS=(hetpool-task hp-ai-lab hp-infra)
command -v useradd >/dev/null || { echo "slurm-accounts: useradd not found (package passwd)" >&2; exit 1; }

for name in "${ACCOUNTS[@]}"; do
  case "$name" in root | "" | *[!a-z0-9_-]*) echo "slurm-accounts: refusing account name '$name'" >&2; exit 2 ;; esac
  if id -u "$name" >/dev/null 2>&1; then
    continue
  fi
  # --user-group: a group of its own, so a job's files can be shared with nobody else.
  useradd --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin "$name" 2>/dev/null \
    || id -u "$name" >/dev/null 2>&1 \
    || { echo "slurm-accounts: could not create account $name" >&2; exit 1; }
  echo "slurm-accounts: created $name (uid $(id -u "$name"))" >&2
done
