"""A discrete-event simulator with a virtual clock around the real `run_cycle`.

There is no second scheduler: every placement decision comes from
`hetpool.scheduling.cycle.run_cycle`, exactly as in the server. The simulator only does
what the server's workers and the backends would: it applies admissions to the
snapshot, runs each task for its *actual* duration on the devices it got (the trace's
`work_s`, which the scheduler never sees), releases them when it ends, and carries out
preemptions. A preempted task loses its progress and starts again from zero when it is
re-admitted — the honest cost of preemption without checkpoints.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from hetpool.core.inventory import ClusterSpec, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.tasks import Priority
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, build_snapshot
from hetpool.sim.trace import TraceTask

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass
class SimConfig:
    min_cycle_interval_s: float = 0.0  # 0: a cycle after every batch of events, as the server reacts
    policy: SchedulingPolicySpec | None = None
    queues: list[QueueSpec] = field(default_factory=list)
    tenant_weights: dict[str, float] = field(default_factory=dict)
    max_time_s: float | None = None  # stop the clock here (tasks still running are reported)
    sample_every_s: float = 0.0  # utilisation/queue samples: at every event (0) or at this step


@dataclass
class TaskOutcome:
    id: str
    tenant: str
    task_type: str
    arrival_s: float
    start_s: float | None = None
    end_s: float | None = None
    pool: str | None = None
    model: str | None = None
    placements: list[tuple[str, str, tuple[int, ...]]] = field(default_factory=list)  # (node, pool, devices) per worker
    devices: float = 0.0
    price_per_hour: float = 0.0
    fallback_used: bool = False
    preemptions: int = 0
    cost: float = 0.0  # device-hours × price, including work lost to preemption

    @property
    def wait_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.arrival_s

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.arrival_s


@dataclass
class Sample:
    t: float
    queued: int
    running: int
    busy: dict[str, float]  # pool → devices in use


@dataclass
class SimResult:
    outcomes: dict[str, TaskOutcome]
    samples: list[Sample]
    pool_devices: dict[str, int]
    pool_models: dict[str, str]
    cycles: int
    core_seconds: float
    end_s: float


class Simulator:
    def __init__(
        self,
        clusters: list[ClusterSpec],
        nodes: list[NodeSpec],
        pools: list[PoolSpec],
        models: dict[str, DeviceModelSpec],
        compat_check,
        config: SimConfig | None = None,
    ) -> None:
        self.models = models
        self.compat_check = compat_check
        self.config = config or SimConfig()
        self.snapshot = build_snapshot(clusters, nodes, pools, models)
        self.pool_price = {p.name: p.price_per_hour for p in pools}

    def run(self, trace: list[TraceTask], progress: Callable[[float, int, int], None] | None = None) -> SimResult:
        cfg, snap = self.config, self.snapshot
        tasks = {t.id: t for t in trace}
        arrivals = sorted(trace, key=lambda t: (t.arrival_s, t.id))
        outcomes = {t.id: TaskOutcome(t.id, t.spec.tenant, t.spec.task_type.value, t.arrival_s) for t in trace}
        queued: dict[str, QueuedTask] = {}
        running: dict[str, tuple[RunningTask, float, float]] = {}  # id → (running task, start, end)
        ends: list[tuple[float, int, str, int]] = []  # (end time, seq, id, attempt)
        attempts: dict[str, int] = dict.fromkeys(tasks, 0)
        seq = itertools.count()
        samples: list[Sample] = []
        pool_devices = {v.name: int(snap.device_totals()[v.rows].sum()) for v in snap.pools}
        busy: dict[str, float] = dict.fromkeys(pool_devices, 0.0)
        now, next_arrival, cycles, core_s, last_cycle = 0.0, 0, 0, 0.0, -float("inf")
        dirty = False
        max_preemptions = (cfg.policy or SchedulingPolicySpec()).max_preemptions

        def release(task_id: str) -> RunningTask:
            rt, _, _ = running.pop(task_id)
            for a in rt.allocations:
                snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
                busy[a.pool] -= len(a.device_indices) * a.device_fraction
            return rt

        while next_arrival < len(arrivals) or queued or running:
            candidates = []
            if next_arrival < len(arrivals):
                candidates.append(arrivals[next_arrival].arrival_s)
            if ends:
                candidates.append(ends[0][0])
            if queued and dirty and last_cycle == now:
                candidates.append(now)  # evictions in the last cycle: place the preemptors now
            if queued and dirty and cfg.min_cycle_interval_s > 0 and last_cycle + cfg.min_cycle_interval_s > now:
                candidates.append(last_cycle + cfg.min_cycle_interval_s)  # the next allowed cycle
            if not candidates:
                break  # queued work that can never start: nothing will change any more
            now = max(now, min(candidates))
            if cfg.max_time_s is not None and now > cfg.max_time_s:
                now = cfg.max_time_s
                break
            while next_arrival < len(arrivals) and arrivals[next_arrival].arrival_s <= now:
                dirty = True
                t = arrivals[next_arrival]
                queued[t.id] = QueuedTask(t.id, t.spec, EPOCH + timedelta(seconds=t.arrival_s))
                next_arrival += 1
            while ends and ends[0][0] <= now:
                _, _, task_id, attempt = heapq.heappop(ends)
                if task_id in running and attempt == attempts[task_id]:
                    dirty = True
                    release(task_id)
                    outcomes[task_id].end_s = now
            # A cycle only when something changed since the last one: the same queue on the
            # same capacity gives the same decisions.
            if queued and dirty and now - last_cycle >= cfg.min_cycle_interval_s:
                last_cycle, dirty = now, False
                result = run_cycle(
                    snap,
                    list(queued.values()),
                    self.compat_check,
                    EPOCH + timedelta(seconds=now),
                    running=[rt for rt, _, _ in running.values()],
                    queues=cfg.queues,
                    policy=cfg.policy,
                    tenant_weights=cfg.tenant_weights,
                    models=self.models,
                    estimate=False,
                )
                cycles += 1
                core_s += result.duration_s
                for decision in result.decisions:
                    for victim in decision.victims:  # evict now; the victim starts over later
                        if victim in running:
                            dirty = True  # freed capacity: the next cycle places the preemptor
                            planned_end = running[victim][2]
                            release(victim)
                            out = outcomes[victim]
                            out.preemptions += 1
                            # Admission charged the whole run; the part never run is refunded,
                            # the part run (and lost) stays charged.
                            out.cost -= (planned_end - now) / 3600 * out.price_per_hour
                            attempts[victim] += 1
                            queued[victim] = QueuedTask(victim, tasks[victim].spec, EPOCH + timedelta(seconds=tasks[victim].arrival_s))
                    if not decision.admit:
                        continue
                    task = tasks[decision.task_id]
                    placements = decision.assignment.placements
                    for p in placements:
                        snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
                        busy[p.pool] += len(p.device_indices) * p.device_fraction
                    # A gang runs at the pace of its slowest worker.
                    duration = max(task.actual_seconds(self.models.get(p.model) if p.device_indices else None) for p in placements)
                    end = now + duration
                    out = outcomes[task.id]
                    out.start_s, out.pool, out.model = now, placements[0].pool, placements[0].model
                    out.placements = [(p.node, p.pool, tuple(p.device_indices)) for p in placements]
                    out.devices = sum(len(p.device_indices) * p.device_fraction for p in placements)
                    out.price_per_hour = sum(p.price_per_hour for p in placements)
                    out.fallback_used = decision.assignment.fallback_used
                    out.cost += duration / 3600 * out.price_per_hour
                    expected = task.spec.runtime_estimate_s
                    rank = Priority(task.spec.priority).rank
                    allocations = tuple(Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb) for p in placements)
                    expected_end = EPOCH + timedelta(seconds=now + (duration if expected is None else _scaled(task, placements, self.models)))
                    running[task.id] = (
                        RunningTask(
                            task.id,
                            task.spec.tenant,
                            rank,
                            task.spec.task_type,
                            allocations,
                            EPOCH + timedelta(seconds=now),
                            expected_end,
                            task.spec.preemptible and out.preemptions < max_preemptions,
                        ),
                        now,
                        end,
                    )
                    heapq.heappush(ends, (end, next(seq), task.id, attempts[task.id]))
                    del queued[task.id]
            if not samples or cfg.sample_every_s <= 0 or now - samples[-1].t >= cfg.sample_every_s:
                samples.append(Sample(now, len(queued), len(running), dict(busy)))
            if progress is not None:
                progress(now, next_arrival, len(arrivals))
        return SimResult(
            outcomes=outcomes,
            samples=samples,
            pool_devices=pool_devices,
            pool_models={v.name: v.model.name for v in snap.pools},
            cycles=cycles,
            core_seconds=core_s,
            end_s=now,
        )


def _scaled(task: TraceTask, placements, models) -> float:
    """What the scheduler expects (its estimate scaled to the devices), not the truth."""
    from hetpool.scheduling.estimate import runtime_on

    return max(runtime_on(task.spec, models.get(p.model)) or 0.0 for p in placements)
