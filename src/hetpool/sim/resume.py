"""The simulator's side of checkpoints: what a stopped checkpointable task has done, what
its next attempt still has to run, and when queues' migration rounds move work.

Two ledgers, kept apart on purpose:

- `done`: the share of its work a task has really done (from the true durations). Only the
  simulated world reads it, to know when a resumed attempt really ends.
- `progress_s`: what the scheduler is told, as the server tells it
  (services/checkpoints.py): the seconds it ran before it checkpointed, on the reference
  device (elapsed × the relative performance of its slowest device). A task is requeued
  with its estimate reduced by that (scheduling.estimate.with_progress) — an estimate that
  was wrong stays wrong by as much.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.estimate import perf_of, with_progress
from hetpool.scheduling.migration import plan_moves
from hetpool.scheduling.queueing import route
from hetpool.scheduling.running import RunningTask

if TYPE_CHECKING:
    from hetpool.sim.engine import _Run
    from hetpool.sim.trace import TraceTask


class Resumes:
    def __init__(self, run: _Run) -> None:
        self.run = run
        self.done: dict[str, float] = {}  # task → share of its work done by attempts that checkpointed
        self.progress_s: dict[str, float] = {}  # task → what the scheduler is told it did (reference-device seconds)
        self.attempt: dict[str, tuple[float, float]] = {}  # task → (its full run on the current devices, the restart cost paid)
        self.rules = {q.name: q.migration for q in run.cfg.queues if q.migration is not None}
        self.last_round: float = -float("inf")
        self.next_round: float | None = None

    def duration(self, task_id: str, full_s: float) -> float:
        """How long an attempt on devices where the whole task takes `full_s` really runs."""
        done = self.done.get(task_id, 0.0)
        overhead = self.run.cfg.resume_overhead_s if done > 0 else 0.0
        self.attempt[task_id] = (full_s, overhead)
        return full_s * (1.0 - done) + overhead

    def stopped(self, task: TraceTask, stopped: RunningTask, started_s: float, signalled_s: float) -> TaskSpec:
        """The spec the stopped task is requeued with: its own, or — checkpointed — with the
        rest of its work up to the moment it was signalled (both ledgers advanced)."""
        spec = task.spec
        checkpoint = spec.checkpoint
        if checkpoint is None or not checkpoint.resume:
            self.done.pop(task.id, None)
            self.progress_s.pop(task.id, None)
            return spec
        now = signalled_s
        full_s, overhead = self.attempt.get(task.id, (0.0, 0.0))
        worked = max(now - started_s - overhead, 0.0)
        if full_s > 0:
            self.done[task.id] = min(self.done.get(task.id, 0.0) + worked / full_s, 0.999)
        models = self.run.sim.models
        perf = min((perf_of(spec, models[a_model]) for a_model in self._models_of(stopped) if a_model in models), default=1.0)
        self.progress_s[task.id] = self.progress_s.get(task.id, 0.0) + max(now - started_s, 0.0) * perf
        return with_progress(spec, self.progress_s[task.id])

    def _models_of(self, task: RunningTask) -> list[str]:
        pool_models = self.run.pool_models
        return [pool_models[a.pool] for a in task.allocations if a.device_indices and a.pool in pool_models]

    def moves(self) -> list[str]:
        """Tasks to move now (a round boundary of some queue's migration rule), in order."""
        if not self.rules or not self.run.running:
            self.next_round = None
            return []
        now = self.run.now
        round_s = min(rule.round_s for rule in self.rules.values())
        if now < self.last_round + round_s:
            self.next_round = self.last_round + round_s
            return []
        self.last_round, self.next_round = now, now + round_s
        run = self.run
        at = run.snap_time()
        reserved = frozenset(n for r in run.reservations for n in r.nodes)
        awaited = frozenset(q.preferred_wait.model for q in run.queued.values() if q.preferred_wait is not None)
        by_queue: dict[str, list[tuple[RunningTask, TaskSpec]]] = {}
        for rt, _, _ in run.running.values():
            spec = run.tasks[rt.id].spec
            queue = route(spec, run.cfg.queues)
            if queue.name in self.rules:
                by_queue.setdefault(queue.name, []).append((rt, spec))
        chosen: list[str] = []
        for name, running in sorted(by_queue.items()):
            for move in plan_moves(run.snap, running, self.rules[name], at, reserved_nodes=reserved, awaited_models=awaited):
                chosen.append(move.task_id)
        return chosen
