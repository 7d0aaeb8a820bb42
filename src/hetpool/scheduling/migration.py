"""Moving checkpointable work to faster devices as they free up (a queue's `migration` rule).

A job started on a slow substitute because nothing better was free keeps it to the end
unless it can move: the tail of long jobs on slow devices is what makes a heterogeneous
cluster's makespan long (Gavel's observation). A task that declared `checkpoint` with
`resume` can move: it is stopped gracefully and resumes where it runs faster.

At a round boundary, after the cycle's admissions, `plan_moves` proposes moves:

- **only onto idle devices nobody queued can take**: what is still free once the cycle has
  admitted what it could, minus the nodes a waiting head has reserved and the models a
  head waits for (its promised preferred model). So a move never delays queued work — it
  only uses devices that would otherwise stay idle this round;
- **only when it pays**: the task's expected remaining time r on its slowest current device
  (perf p) becomes r·p/p' on the target (perf p'), plus the restart overhead and the
  task's checkpoint grace; the move must save more than `min_gain`·r. With no estimate
  (or once it is overrun) r is taken as the time it has run so far: the best guess of how
  long work that has run t will still run, absent anything else;
- **fair across tenants**: the idle devices are handed out one move per tenant in turn
  (each tenant's largest gain first), so one tenant's many jobs cannot take them all.

A move only ever goes to a strictly faster model, so a task moves at most once per model
faster than its current one: no ping-pong. The core decides; the server (or the
simulator) carries the moves out as graceful stops and requeues (services/checkpoints.py).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

import numpy as np

from hetpool.core.inventory import DeviceModelSpec
from hetpool.core.policy import MigrationRule
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.estimate import perf_of
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot

# How a move's stop reason begins: a move is a graceful stop like a preemption, but does not
# count as one against the task's max_preemptions (services/task_lifecycle.preempt_now).
MOVE_REASON_PREFIX = "moved to faster"


@dataclass(frozen=True)
class Move:
    task_id: str
    tenant: str
    from_model: str
    to_model: str
    remaining_s: float  # expected, on the current devices
    remaining_after_s: float  # expected on the target, restart overhead and grace included

    @property
    def gain_s(self) -> float:
        return self.remaining_s - self.remaining_after_s

    def reason(self) -> str:
        return (
            f"moved to faster {self.to_model} devices (checkpointed): expected to finish {self.gain_s / 60:.0f} min sooner than on {self.from_model}"
        )


def movable(spec: TaskSpec, task: RunningTask) -> bool:
    """A task that may move: it resumes from a checkpoint, holds whole devices, asks for no
    topology (a move could break it) and is not already being stopped."""
    devices = spec.per_worker.devices
    checkpoint = spec.checkpoint
    if checkpoint is None or not checkpoint.resume or devices is None or devices.memory_gb or devices.cores_percent:
        return False
    return spec.topology is None and not task.being_preempted and task.preemptible and bool(task.allocations)


def remaining_s(task: RunningTask, now: datetime) -> float:
    """Expected seconds left: to its expected end, else (no estimate, or overrun) as long as it has run."""
    if task.expected_end is not None and task.expected_end > now and task.revised_from is None:
        return (task.expected_end - now).total_seconds()
    return max((now - task.started_at).total_seconds(), 0.0)


def _allowed(spec: TaskSpec, pool, model: DeviceModelSpec) -> bool:
    """The pool is one the task could be placed on (class, models, memory, features, its candidates)."""
    devices = spec.per_worker.devices
    if devices is None or model.device_class != devices.device_class:
        return False
    if (devices.models and model.name not in devices.models) or model.memory_gb < devices.min_memory_gb:
        return False
    if spec.features and not set(spec.features) <= pool.features:
        return False
    pool_name = pool.name
    candidates = spec.candidates
    return not candidates or pool_name in candidates or model.name in candidates


def plan_moves(
    snap: Snapshot,
    running: list[tuple[RunningTask, TaskSpec]],
    rule: MigrationRule,
    now: datetime,
    *,
    reserved_nodes: frozenset[str] = frozenset(),
    awaited_models: frozenset[str] = frozenset(),
) -> list[Move]:
    """The moves worth making now onto `snap`'s idle devices (see the module doc)."""
    free = snap.row_free_whole.astype(np.int64).copy()
    usable_rows: dict[str, list[int]] = defaultdict(list)  # target model -> rows it could use
    for row in range(len(free)):
        pool = snap.pools[int(snap.row_pool[row])]
        node = int(snap.row_node[row])
        if free[row] > 0 and pool.model.name not in awaited_models and snap.node_names[node] not in reserved_nodes and snap.node_healthy[node]:
            usable_rows[pool.model.name].append(row)
    if not usable_rows:
        return []
    options: dict[str, list[tuple[float, Move, TaskSpec]]] = defaultdict(list)
    for task, spec in running:
        if not movable(spec, task):
            continue
        models = {a.pool: snap.pools[snap.pool_by_name[a.pool]].model for a in task.allocations if a.pool in snap.pool_by_name}
        if not models:
            continue
        current = min(models.values(), key=lambda m: perf_of(spec, m))
        p_now, left = perf_of(spec, current), remaining_s(task, now)
        if left <= 0:
            continue
        best = None
        for target_name, rows in usable_rows.items():
            target = snap.pools[int(snap.row_pool[rows[0]])].model
            p_target = perf_of(spec, target)
            if p_target <= p_now or not any(_allowed(spec, snap.pools[int(snap.row_pool[r])], target) for r in rows):
                continue
            after = left * p_now / p_target + rule.overhead_s + spec.checkpoint.grace_s
            if left - after > rule.min_gain * left and (best is None or after < best.remaining_after_s):
                best = Move(task.id, task.tenant, current.name, target_name, left, after)
        if best is not None:
            options[task.tenant].append((best.gain_s, best, spec))
    return _hand_out(snap, free, usable_rows, options, rule.max_moves)


def _hand_out(snap: Snapshot, free: np.ndarray, usable_rows: dict[str, list[int]], options: dict, limit: int) -> list[Move]:
    """One move per tenant in turn, each tenant's largest gain first, while the idle devices last."""
    for moves in options.values():
        moves.sort(key=lambda item: (-item[0], item[1].task_id))
    queues = {tenant: list(moves) for tenant, moves in sorted(options.items())}
    chosen: list[Move] = []
    while queues and len(chosen) < limit:
        for tenant in list(queues):
            if not queues[tenant]:
                del queues[tenant]
                continue
            _, move, spec = queues[tenant].pop(0)
            if _take(snap, free, usable_rows[move.to_model], spec):
                chosen.append(move)
                if len(chosen) >= limit:
                    break
    return chosen


def _take(snap: Snapshot, free: np.ndarray, rows: list[int], spec: TaskSpec) -> bool:
    """Claim room for every worker of the task on these rows (whole devices per worker, pool
    allowed); False, claiming nothing, when they do not all fit."""
    count = spec.per_worker.devices.count
    picked: list[int] = []
    room = free.copy()
    for row in rows:
        pool = snap.pools[int(snap.row_pool[row])]
        if not _allowed(spec, pool, pool.model):
            continue
        while room[row] >= count and len(picked) < spec.workers:
            room[row] -= count
            picked.append(row)
        if len(picked) == spec.workers:
            free[:] = room
            return True
    return False
