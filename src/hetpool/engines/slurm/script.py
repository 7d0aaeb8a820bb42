"""What one hetpool job becomes on Slurm: the sbatch arguments and the scripts it runs.

Pure functions of the request, the configuration and what `scontrol show node` says, so
they are unit-tested without Slurm. `backend.py` runs them.

One sbatch per task. Workers are grouped by node; a node holding k workers of the job runs
k tasks of it (SLURM_LOCALID 0..k-1) and gets k times one worker's GRES and memory. Nodes
with the same shape form one job component (`--nodes=M --ntasks=M*k --ntasks-per-node=k
--nodelist=...`); a gang whose nodes hold different numbers of workers becomes a
heterogeneous job, one component per shape, separated by ":" on the sbatch command line.

Slurm numbers tasks by its own node order, not by hetpool rank, so the worker wrapper looks
its rank up from (SLURMD_NODENAME, SLURM_LOCALID), not from SLURM_PROCID.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import ENV_NAME, LaunchRequest, WorkerLaunch
from hetpool.engines.slurm.config import SlurmPlanError
from hetpool.engines.slurm.gres import NULL as _NULL
from hetpool.engines.slurm.gres import SHARED_GRES as _SHARED_GRES
from hetpool.engines.slurm.gres import GresEntry, gres_model, parse_gres

# Slurm node names we put into scripts (case patterns, file names): no shell metacharacters.
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# gres/gpu sets these for every step on every node (relative numbers under ConstrainDevices).
GPU_PLUGIN_VARS = ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "GPU_DEVICE_ORDINAL", "ZE_AFFINITY_MASK")


@dataclass(frozen=True)
class SlurmNode:
    name: str  # as Slurm spells it
    addr: str  # NodeAddr: how other nodes reach it (the gang's master address)
    gres: tuple[GresEntry, ...]


@dataclass(frozen=True)
class RankPlan:
    rank: int
    node: str  # Slurm node name
    slot: int  # which of the job's tasks on that node it is (SLURM_LOCALID)
    tasks_on_node: int
    gres: str  # "npu:910b3" ("name:type"), "" for CPU-only workers
    devices: int
    env_var: str  # the model's visible-devices variable, "" when none


@dataclass(frozen=True)
class Component:
    nodes: tuple[str, ...]
    tasks_per_node: int
    gres: str  # per node, with count: "gpu:a100:4"; "" for none
    cpus_per_task: int
    mem_mb: int  # per node; 0 leaves it to Slurm (DefMemPerCPU) — never --mem=0, which means "all of it"


@dataclass(frozen=True)
class JobPlan:
    ranks: tuple[RankPlan, ...]
    components: tuple[Component, ...]
    master_addr: str  # rank 0's node for multi-node jobs; "" keeps worker_environment's loopback


# -- parsing what Slurm reports -----------------------------------------------------------


def parse_nodes(text: str) -> dict[str, SlurmNode]:
    """`scontrol --oneliner show node` -> {lower-case name: node} (hetpool names are lower-case)."""
    nodes = {}
    for line in text.splitlines():
        fields = dict(re.findall(r"(?:^|\s)(NodeName|NodeAddr|NodeHostName|Gres)=(\S*)", line))
        name = fields.get("NodeName", "")
        if not name:
            continue
        addr = next((fields[k] for k in ("NodeAddr", "NodeHostName") if fields.get(k, "") not in _NULL), name)
        nodes[name.lower()] = SlurmNode(name=name, addr=addr, gres=tuple(parse_gres(fields.get("Gres", ""))))
    return nodes


def gres_for(worker: WorkerLaunch, node: SlurmNode, catalog: DeviceCatalog, overrides: dict[str, str]) -> str:
    """`name:type` to request for `worker`'s devices on `node`; "" for a CPU-only worker.

    The inverse of the inventory mapping: first the node's own GRES that the connector
    reported as this model (so `npu:910b3` is found for ascend-910b3 although the catalog
    says `npu:910b`), then a `gres_models` entry naming the model, then the catalog's
    `slurm_gres`.
    """
    if not worker.device_indices:
        return ""
    model = worker.model or ""
    for entry in node.gres:
        if entry.name.lower() not in _SHARED_GRES and gres_model(entry.name, entry.type, catalog, overrides) == model:
            return f"{entry.name}:{entry.type}" if entry.type else entry.name
    for key, mapped in overrides.items():
        if mapped == model:
            return key.rstrip(":")
    if model in catalog and catalog.get(model).slurm_gres:
        return catalog.get(model).slurm_gres
    raise SlurmPlanError(f"no Slurm GRES for device model {model!r} on node {node.name}: map it with backend_config gres_models 'name:type={model}'")


# -- the plan ---------------------------------------------------------------------------------


def slurm_node(hetpool_node: str, prefix: str, nodes: dict[str, SlurmNode]) -> SlurmNode:
    """hetpool node name (node_prefix + Slurm name, lower-cased) -> the Slurm node."""
    if prefix and not hetpool_node.startswith(prefix):
        raise SlurmPlanError(f"node {hetpool_node!r} does not carry this cluster's node_prefix {prefix!r}")
    name = hetpool_node[len(prefix) :]
    node = nodes.get(name.lower())
    if node is None:
        raise SlurmPlanError(f"node {hetpool_node!r}: Slurm has no node {name!r}")
    if not _NODE_NAME.fullmatch(node.name):
        raise SlurmPlanError(f"Slurm node name {node.name!r} is not usable in a job script")
    return node


def plan_job(request: LaunchRequest, nodes: dict[str, SlurmNode], catalog: DeviceCatalog, overrides: dict[str, str], prefix: str = "") -> JobPlan:
    if not request.workers:
        raise SlurmPlanError(f"{request.job_name}: a launch request needs at least one worker")
    ranks = [w.rank for w in request.workers]
    if len(set(ranks)) != len(ranks):
        raise SlurmPlanError(f"{request.job_name}: duplicate worker ranks {sorted(ranks)}")
    by_node: dict[str, tuple[SlurmNode, list[WorkerLaunch]]] = {}
    for worker in sorted(request.workers, key=lambda w: w.rank):
        node = slurm_node(worker.node, prefix, nodes)
        by_node.setdefault(node.name, (node, []))[1].append(worker)

    plans: list[RankPlan] = []
    shapes: dict[tuple[int, str, int, int], list[str]] = {}  # (tasks, gres, cpus, mem) -> nodes, in rank order
    for node, workers in by_node.values():
        kinds = {(gres_for(w, node, catalog, overrides), len(w.device_indices)) for w in workers}
        if len(kinds) > 1:
            # Slurm gives a node one GRES amount for the whole job; its workers split it evenly.
            raise SlurmPlanError(f"workers on node {node.name} need different devices {sorted(kinds)}; Slurm splits a node's GRES evenly")
        (gres, devices), k = kinds.pop(), len(workers)
        env_vars = {w.visible_devices_env for w in workers}
        for var in env_vars - {""}:
            if not ENV_NAME.fullmatch(var):
                raise SlurmPlanError(f"visible-devices variable {var!r} is not a variable name")
        for slot, w in enumerate(workers):
            plans.append(RankPlan(w.rank, node.name, slot, k, gres, devices, w.visible_devices_env if devices else ""))
        cpus = max(1, *(math.ceil(w.cpu) for w in workers))
        mem = sum(math.ceil(w.memory_gb * 1024) for w in workers) if all(w.memory_gb > 0 for w in workers) else 0
        shapes.setdefault((k, f"{gres}:{k * devices}" if gres else "", cpus, mem), []).append(node.name)
    components = tuple(Component(tuple(names), k, gres, cpus, mem) for (k, gres, cpus, mem), names in shapes.items())
    rank0 = min(request.workers, key=lambda w: w.rank)
    master = slurm_node(rank0.node, prefix, nodes).addr if len(by_node) > 1 else ""
    return JobPlan(ranks=tuple(sorted(plans, key=lambda p: p.rank)), components=components, master_addr=master)


def sbatch_args(
    name: str,
    job_dir: Path,
    plan: JobPlan,
    *,
    partition: str = "",
    account: str = "",
    qos: str = "",
    comment: str = "",
    out_dir: Path | None = None,
    run_as: list[str] | None = None,
) -> list[str]:
    """The sbatch command line (without the program and the script). `out_dir`: where the job
    may write (runas.py); `run_as`: --uid/--gid when the server submits as root."""
    args = [
        f"--job-name={name}",  # the idempotency key: submit and find look jobs up by it
        "--parsable",
        *(run_as or []),
        f"--chdir={job_dir}",
        f"--output={(out_dir or job_dir) / 'batch.log'}",  # the batch step's own output; workers write their own files
        "--open-mode=append",
        # Not the server's environment (database URLs, tokens): the user's login environment
        # on the node, plus what the worker wrapper sets.
        "--export=NONE",
        # hetpool decides about retries; a requeued job would run the command a second time.
        "--no-requeue",
    ]
    if comment:
        args.append(f"--comment={comment}")
    for i, c in enumerate(plan.components):
        if i:
            args.append(":")
        args += [
            f"--nodes={len(c.nodes)}",
            f"--ntasks={len(c.nodes) * c.tasks_per_node}",
            f"--ntasks-per-node={c.tasks_per_node}",
            f"--nodelist={','.join(c.nodes)}",
            f"--cpus-per-task={c.cpus_per_task}",
        ]
        if c.mem_mb:
            args.append(f"--mem={c.mem_mb}")
        if c.gres:
            args.append(f"--gres={c.gres}")
        args += [f"--{flag}={value}" for flag, value in (("partition", partition), ("account", account), ("qos", qos)) if value]
    return args


# -- the scripts --------------------------------------------------------------------------------

_EXPAND = """\
expand() {  # "0-2,5" -> "0,1,2,5"
  out=
  for part in $(printf '%s' "$1" | tr ',' ' '); do
    first=${part%-*} last=${part#*-}
    while [ "$first" -le "$last" ]; do out=$out${out:+,}$first; first=$((first + 1)); done
  done
  printf '%s\\n' "$out"
}
"""


def batch_script(name: str, job_dir: Path, plan: JobPlan, out_dir: Path | None = None) -> str:
    """The batch step: runs once, on the job's first node, and launches every worker with srun.
    It reads its scripts from `job_dir` and writes only under `out_dir` (default: job_dir)."""
    het = f" --het-group=0-{len(plan.components) - 1}" if len(plan.components) > 1 else ""
    devices = ""
    if any(r.devices for r in plan.ranks):
        devices = (
            "# The device indices Slurm allocated on each node (scontrol show job -d: GRES=npu:910b3:2(IDX:0-1)),\n"
            '# expanded to "0,1" in alloc/<node> for the workers. Absent when gres.conf gives only Count=.\n'
            + _EXPAND
            + 'mkdir -p "$O/alloc"\n'
            + "scontrol show job -d \"$SLURM_JOB_ID\" | sed -n 's/^ *Nodes=\\([^ ]*\\) .*GRES=[^(]*(IDX:\\([0-9,-]*\\)).*/\\1 \\2/p' |\n"
            + "  while read -r nodes idx; do\n"
            + '    list=$(expand "$idx")\n'
            + '    for node in $(scontrol show hostnames "$nodes"); do printf \'%s\\n\' "$list" >"$O/alloc/$node"; done\n'
            + "  done\n"
        )
    return f"""#!/bin/sh
# hetpool job {name}: the batch step, on the job's first node (generated by hetpool.engines.slurm).
J={shlex.quote(str(job_dir))}
O={shlex.quote(str(out_dir or job_dir))}
# What the job writes is its account's alone (the server reads it as root or through the group).
umask 027
# --export=NONE and an account without a login shell leave no PATH; srun and the workers need one.
PATH=${{PATH:-/usr/local/bin:/usr/bin:/bin}}
export PATH
finish() {{ printf '%s\\n' "$1" >"$O/.result.tmp" && mv -f "$O/.result.tmp" "$O/result"; }}
# At most once: a slurmctld killed and restarted from state saved before this job ran (no HA)
# starts it again under the same id, and hetpool never does (each attempt is a new job).
# mkdir is atomic: the second start finds the mark, runs nothing, and answers with the first
# run's outcome (or, the first still running or killed without a trace, that it refused).
if ! mkdir "$O/once" 2>/dev/null; then
  echo "hetpool: job {name} already started once (as Slurm job $(cat "$O/started" 2>/dev/null)); not run a second time" >&2
  [ -f "$O/result" ] || exit 125
  read -r kind code rest <"$O/result"
  [ "$kind" = exit ] && exit "$code"
  exit 143
fi
# The id goes into the job directory first: a restarted hetpool server finds the job there
# even after slurmctld has forgotten it (there is no slurmdbd to ask).
printf '%s\\n' "$SLURM_JOB_ID" >"$O/.started.tmp" && mv -f "$O/.started.tmp" "$O/started"
# scancel, a time limit, preemption: leave a trace for a poll after Slurm has forgotten the job.
trap 'finish "signal TERM"; exit 143' TERM
{devices}# gres/gpu sets these per step on every node: the batch node's own must not leak to workers elsewhere.
unset {" ".join(GPU_PLUGIN_VARS)}
# sbatch --export=NONE would be inherited by srun, and the workers would start without PATH.
export SLURM_EXPORT_ENV=ALL
# In the background, so that the TERM trap runs at once rather than after srun returns.
srun --kill-on-bad-exit=1{het} /bin/sh "$J/worker.sh" &
wait $!
rc=$?
if [ -f "$O/first-failure/rank" ]; then
  read -r rank code <"$O/first-failure/rank"
  finish "exit $code rank $rank"
  exit "$code"
fi
finish "exit $rc"  # 0, or srun itself failed (see batch.log)
exit "$rc"
"""


def worker_script(name: str, job_dir: Path, plan: JobPlan, out_dir: Path | None = None) -> str:
    """One Slurm task = one hetpool worker: rank lookup, environment, devices, the command."""
    cases = "".join(
        f"  {shlex.quote(f'{r.node}/{r.slot}')}) hetpool_rank={r.rank} hetpool_slot={r.slot} hetpool_tasks={r.tasks_on_node}"
        f" hetpool_devices={r.devices} hetpool_var={r.env_var or '-'} hetpool_gpu={int(_is_gpu(r))}"
        f" hetpool_keep={int(_is_gpu(r) and r.env_var in GPU_PLUGIN_VARS)} ;;\n"
        for r in plan.ranks
    )
    gpu_vars = " ".join(GPU_PLUGIN_VARS)
    return f"""#!/bin/sh
# hetpool job {name}: one worker, started by srun as one Slurm task (generated by hetpool.engines.slurm).
J={shlex.quote(str(job_dir))}
O={shlex.quote(str(out_dir or job_dir))}
umask 027
# Slurm numbers tasks in its own node order, so the hetpool rank comes from node and local task id.
case "$SLURMD_NODENAME/$SLURM_LOCALID" in
{cases}  *) echo "hetpool: no worker for Slurm task $SLURM_PROCID on $SLURMD_NODENAME (local id $SLURM_LOCALID)" >&2; exit 97 ;;
esac
W="$O/worker-$hetpool_rank"
exec >>"$W/output.log" 2>&1
. "$J/env-$hetpool_rank.sh"
# A run-as account has no usable home (/nonexistent): tools that write caches get the worker's directory.
if [ -z "${{HOME-}}" ] || [ ! -d "$HOME" ] || [ ! -w "$HOME" ]; then export HOME="$W"; fi
if [ "$hetpool_devices" -gt 0 ]; then
  from=$((hetpool_slot * hetpool_devices + 1)) to=$(((hetpool_slot + 1) * hetpool_devices))
  # What Slurm really allocated on this node, this worker's share (hetpool's own choice is
  # in HETPOOL_PLACED_DEVICE_INDICES: Slurm, not hetpool, picks the physical devices).
  if [ -s "$O/alloc/$SLURMD_NODENAME" ]; then
    HETPOOL_DEVICE_INDICES=$(cut -d, -f"$from-$to" <"$O/alloc/$SLURMD_NODENAME")
    export HETPOOL_DEVICE_INDICES
  fi
  seen=
  if [ "$hetpool_gpu" = 1 ]; then
    # gres/gpu set its variables to the node's whole allocation: each worker takes its share.
    for var in {gpu_vars}; do
      eval "value=\\${{$var-}}"
      [ -n "$value" ] && [ "$hetpool_tasks" -gt 1 ] && value=$(printf '%s\\n' "$value" | cut -d, -f"$from-$to") && export "$var=$value"
    done
    seen=${{CUDA_VISIBLE_DEVICES-}}
  fi
  if [ "$hetpool_var" != - ]; then
    eval "value=\\${{$hetpool_var-}}"
    # Slurm's own value stays (gpu); npu, mlu, dcu … get no variable from Slurm: the allocated
    # indices (else hetpool's); a value from the user's login profile must not win.
    if [ "$hetpool_keep" != 1 ] || [ -z "$value" ]; then export "$hetpool_var=${{seen:-$HETPOOL_DEVICE_INDICES}}"; fi
  fi
fi
cd "$W" || exit 1
# A stop signal for a checkpoint (scancel --signal reaches every process of the step) is the
# command's to handle: this shell catches it, waits for the command and records its exit.
trap ':' USR1 USR2 INT TERM
/bin/sh -c "$(cat "$J/command.sh")"
code=$?
printf '%s\\n' "$code" >"$W/.exit_code.tmp" && mv -f "$W/.exit_code.tmp" "$W/exit_code"
# The first rank to fail gives the job its exit code (srun then stops the others).
if [ "$code" -ne 0 ] && mkdir "$O/first-failure" 2>/dev/null; then printf '%s %s\\n' "$hetpool_rank" "$code" >"$O/first-failure/rank"; fi
exit "$code"
"""


def _is_gpu(rank: RankPlan) -> bool:
    return rank.gres.split(":")[0].lower() == "gpu"


def env_script(env: dict[str, str]) -> str:
    """`export NAME='value'` lines, sourced by the worker wrapper."""
    bad = sorted(k for k in env if not ENV_NAME.fullmatch(k))
    if bad:
        raise SlurmPlanError(f"environment variable names {bad} are not valid shell names")
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())


def rank_environment(env: dict[str, str], rank: RankPlan, placed: Iterable[int], master_addr: str) -> dict[str, str]:
    """worker_environment()'s variables adjusted for Slurm: the visible-devices variable is
    set by the wrapper from the allocation; the gang meets at rank 0's node."""
    env = {k: v for k, v in env.items() if k != rank.env_var}
    env["HETPOOL_PLACED_DEVICE_INDICES"] = ",".join(str(i) for i in placed)
    if master_addr:
        env["HETPOOL_MASTER_ADDR"] = master_addr
    return env
