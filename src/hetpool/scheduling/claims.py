"""A preemptor's claim on the placement its preemption planned (kube-scheduler's nominated node).

When a head evicts work, the plan that chose the victims also chose where the head lands:
the victims' devices and, often, free devices beside them. Until the victims are gone the
head cannot start, and the head is decided again in a later cycle. Without a claim, the
free part of that placement goes to the next head of this very cycle, and what the
victims release goes to whoever comes first in the next one — often another preemptor.
The head then finds its placement taken, evicts a second set of victims, and the work
that took its place is evicted in turn by the next head: on a full estate with many
priorities that churn never settled (the flat benchmark evicted 20–70 tasks every cycle
for 200 cycles).

So the placement is *claimed*: from the moment of the plan, whatever of it is free is held
in the cycle's working snapshot for the claimant alone, in this cycle and in the next ones
while it is a preemptor (cycle_heads.note_preemptors: a few cycles after its last
eviction, longer while its victims are still releasing). Held against every other head,
whatever its priority: a higher-priority head can preempt for itself, and claims live a
few cycles only. When the claimant's turn comes its claim is given back to it just before
it is decided; if it is admitted, what it did not use is free for the rest of the cycle;
if it still waits, the claim is held again. The claim is kept on the snapshot
(`Snapshot.claims`), as the preemptors are, across cycles.

Only capacity that is free in the working snapshot is ever held: a victim still running
(being preempted) keeps its part busy, and its part is held once it has been released.
Evictions under the backfill bound (cycle_preempt.plan_overrun_eviction) claim nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetpool.scheduling.snapshot import Allocation, Snapshot

__all__ = ["Claims", "claimed_placement"]

_EPS = 1e-9


def claimed_placement(placements) -> tuple[Allocation, ...]:
    """The allocations a planned assignment's placements stand for."""
    return tuple(Allocation(p.node, p.pool, tuple(p.device_indices), p.device_fraction, p.cpu, p.memory_gb) for p in placements)


@dataclass(frozen=True)
class _Held:
    """What of one claimed allocation is held in the working snapshot."""

    row: int
    device_indices: tuple[int, ...]
    fraction: float
    cpu: float
    memory_gb: float


def _hold(working: Snapshot, allocations: tuple[Allocation, ...]) -> list[_Held]:
    """Take from `working` whatever of `allocations` is free now."""
    held = []
    for a in allocations:
        row = working.row_of(a.node, a.pool)
        if row is None:
            continue  # the node or pool is gone from the inventory
        node = int(working.row_node[row])
        devices = working.dev_free[row]
        free = tuple(i for i in a.device_indices if 0 <= i < len(devices) and devices[i] >= a.device_fraction - _EPS)
        cpu = min(a.cpu, max(0.0, float(working.free_cpu[node])))
        memory = min(a.memory_gb, max(0.0, float(working.free_mem[node])))
        if free or cpu > _EPS or memory > _EPS:
            working.take(row, free, a.device_fraction, cpu, memory)
            held.append(_Held(row, free, a.device_fraction, cpu, memory))
    return held


class Claims:
    """The claims of one cycle: those kept on the snapshot, held in the working snapshot."""

    def __init__(self, working: Snapshot, kept: dict[str, tuple[Allocation, ...]], claimants) -> None:
        """Hold the kept claims of `claimants` (the preemptors still queued); drop the rest."""
        self.working = working
        self.kept = {task_id: kept[task_id] for task_id in claimants if task_id in kept}
        self.held = {task_id: _hold(working, allocations) for task_id, allocations in self.kept.items()}

    def give_back(self, task_id: str) -> bool:
        """Free the claimant's own claim for its own evaluation; True when it held any."""
        held = self.held.pop(task_id, ())
        for h in held:
            self.working.release(h.row, h.device_indices, h.fraction, h.cpu, h.memory_gb)
        return bool(held)

    def after(self, task_id: str, admitted: bool, planned: tuple[Allocation, ...] | None) -> None:
        """After the task was decided: a new plan replaces its claim; admitted, it has none;
        otherwise it holds its claim again."""
        if planned is not None:
            self.kept[task_id] = planned
        elif admitted:
            self.kept.pop(task_id, None)
        if not admitted and task_id in self.kept:
            self.held[task_id] = _hold(self.working, self.kept[task_id])

    def without_held(self) -> Snapshot:
        """A copy of the working snapshot with every claim held now given back."""
        free = self.working.copy()
        for pieces in self.held.values():
            for h in pieces:
                free.release(h.row, h.device_indices, h.fraction, h.cpu, h.memory_gb)
        return free

    def keep(self, preemptors: dict) -> dict[str, tuple[Allocation, ...]]:
        """The claims to keep on the snapshot: those of the tasks still preemptors."""
        return {task_id: allocations for task_id, allocations in self.kept.items() if task_id in preemptors}
