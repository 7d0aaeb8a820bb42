"""A discrete-event simulator with a virtual clock around the real `run_cycle`.

There is no second scheduler: every placement decision comes from
`hetpool.scheduling.cycle.run_cycle`, exactly as in the server. The simulator only does
what the server's workers and the backends would: it applies admissions to the
snapshot, runs each task for its *actual* duration on the devices it got (the trace's
`work_s`, which the scheduler never sees), releases them when it ends, and carries out
preemptions. A preempted task loses its progress and starts again from zero when it is
re-admitted — the honest cost of preemption without checkpoints — unless it declared
`checkpoint` (with resume): then it keeps the work done and its next attempt runs the rest,
after `SimConfig.resume_overhead_s` (reloading the checkpoint). A queue with a `migration`
rule moves such tasks to faster idle devices at its round boundaries (scheduling/migration.py).

What really happens comes from the trace's true durations, read through `truth` only (by
default `TraceTask.actual_seconds`): the scheduler sees the task specs and nothing else, so
a run whose trace holds NaN for every true duration and gets them through `truth` decides
exactly the same (bench/gavel_compare.py's noisy/none estimates; tests/sim/test_no_oracle.py).

Quotas (`SimConfig.quotas`, the inventory's `kind: Quota` documents) are enforced as live:
before every cycle a `QuotaBook` is charged with the running work in start order
(`QuotaBook.charge_running`, the same call the server's scheduler makes) and handed to
`run_cycle`, which admits within quota, lets a tenant borrow a sibling's idle quota and
lets the lender reclaim it by preemption.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from hetpool.core.inventory import ClusterSpec, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.quota import QuotaSpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.backfill import PreferredWait
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.explain import Reason
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, build_snapshot
from hetpool.sim.resume import Resumes
from hetpool.sim.trace import TraceTask

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
# A pending task with one of these reasons waits on its quota, not on devices.
QUOTA_REASONS = frozenset({Reason.OVER_QUOTA, Reason.EXCEEDS_QUOTA})


@dataclass
class SimConfig:
    min_cycle_interval_s: float = 0.0  # 0: a cycle after every batch of events, as the server reacts
    policy: SchedulingPolicySpec | None = None
    queues: list[QueueSpec] = field(default_factory=list)
    tenant_weights: dict[str, float] = field(default_factory=dict)
    quotas: list[QuotaSpec] = field(default_factory=list)  # none: no quota is enforced
    max_time_s: float | None = None  # stop the clock here (tasks still running are reported)
    sample_every_s: float = 0.0  # utilisation/queue samples: at every event (0) or at this step
    resume_overhead_s: float = 60.0  # a checkpointed task's restart cost on each resume (besides a migration's own overhead)
    # How long a checkpointed task, once signalled to stop, still holds its devices while it
    # writes its checkpoint (no progress meanwhile). None: its declared grace — the worst
    # case the server allows it (services/checkpoints.py).
    checkpoint_write_s: float | None = None


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
    migrations: int = 0  # moves to faster devices (checkpointed, resumed there)
    borrowed: int = 0  # admissions that took a sibling's idle quota (over the task's nominal)
    over_quota_cycles: int = 0  # cycles it waited because its quota was spent (capacity or not)
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


@dataclass(frozen=True)
class Admission:
    t: float
    task_id: str
    borrowing: bool  # over its nominal quota on some limit, on a sibling's idle quota


@dataclass
class SimResult:
    outcomes: dict[str, TaskOutcome]
    samples: list[Sample]
    pool_devices: dict[str, int]
    pool_models: dict[str, str]
    cycles: int
    core_seconds: float
    end_s: float
    admissions: list[Admission] = field(default_factory=list)  # every admission, in order (re-admissions too)


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

    def run(
        self,
        trace: list[TraceTask],
        progress: Callable[[float, int, int], None] | None = None,
        truth: Callable[[TraceTask, DeviceModelSpec | None], float] | None = None,
    ) -> SimResult:
        state = _Run(self, trace, truth or TraceTask.actual_seconds)
        while state.next_arrival < len(state.arrivals) or state.queued or state.running:
            now = state.next_time()
            if now is None:
                break
            state.now = now
            state.arrive()
            state.finish()
            state.stops()
            state.promises_due()
            # A cycle only when something changed since the last one: the same queue on the
            # same capacity gives the same decisions.
            if state.queued and state.dirty and (state.now - state.last_cycle >= self.config.min_cycle_interval_s or state.cycle_at_once()):
                state.cycle()
            state.migrate()
            state.sample()
            if progress is not None:
                progress(state.now, state.next_arrival, len(state.arrivals))
        snap = self.snapshot
        return SimResult(
            outcomes=state.outcomes,
            samples=state.samples,
            pool_devices=state.pool_devices,
            pool_models={v.name: v.model.name for v in snap.pools},
            cycles=state.cycles,
            core_seconds=state.core_s,
            end_s=state.now,
            admissions=state.admissions,
        )


class _Run:
    """One simulation: the virtual clock, the queue, the running work and its ends."""

    def __init__(self, sim: Simulator, trace: list[TraceTask], truth: Callable[[TraceTask, DeviceModelSpec | None], float]) -> None:
        self.sim, self.cfg, self.snap, self.truth = sim, sim.config, sim.snapshot, truth
        self.tasks = {t.id: t for t in trace}
        self.arrivals = sorted(trace, key=lambda t: (t.arrival_s, t.id))
        self.outcomes = {t.id: TaskOutcome(t.id, t.spec.tenant, t.spec.task_type.value, t.arrival_s) for t in trace}
        self.queued: dict[str, QueuedTask] = {}
        self.running: dict[str, tuple[RunningTask, float, float]] = {}  # id → (running task, start, end)
        self.ends: list[tuple[float, int, str, int]] = []  # (end time, seq, id, attempt)
        self.attempts: dict[str, int] = dict.fromkeys(self.tasks, 0)
        self.seq = itertools.count()
        self.samples: list[Sample] = []
        self.admissions: list[Admission] = []
        self.pool_models = {v.name: v.model.name for v in self.snap.pools}
        self.pool_devices = {v.name: int(self.snap.device_totals()[v.rows].sum()) for v in self.snap.pools}
        self.busy: dict[str, float] = dict.fromkeys(self.pool_devices, 0.0)
        self.now, self.next_arrival, self.cycles, self.core_s, self.last_cycle = 0.0, 0, 0, 0.0, -float("inf")
        self.dirty = False
        # The last cycle evicted or carried tasks: the next one may follow at the same moment
        # (as the server's scheduler runs its next round at once), at most `rotation` times
        # in a row — enough for the rotating scan to see the whole queue once (cycle_heads.heads);
        # after that the next cycle waits for the interval like any other.
        self.again, self.same_moment = False, 0
        self.promise_due: float | None = None  # when the earliest promise to a waiting task breaks
        self.max_preemptions = (self.cfg.policy or SchedulingPolicySpec()).max_preemptions
        self.resumes = Resumes(self)
        self.stopping: dict[str, tuple[float, float, bool]] = {}  # id → (stops at, signalled at, a migration)
        self.reservations: list = []  # the last cycle's: the nodes held for waiting heads

    def next_time(self) -> float | None:
        """When the next thing happens; None: nothing will change any more (or max_time_s is reached)."""
        cfg, now = self.cfg, self.now
        candidates = []
        if self.next_arrival < len(self.arrivals):
            candidates.append(self.arrivals[self.next_arrival].arrival_s)
        if self.ends:
            candidates.append(self.ends[0][0])
        if self.queued and self.promise_due is not None:
            candidates.append(self.promise_due)  # a wait for a preferred model is past its promise
        if self.queued and self.dirty and self.cycle_at_once():
            candidates.append(now)  # evictions or carried tasks in the last cycle: cycle again now
        if self.queued and self.dirty and cfg.min_cycle_interval_s > 0 and self.last_cycle + cfg.min_cycle_interval_s > now:
            candidates.append(self.last_cycle + cfg.min_cycle_interval_s)  # the next allowed cycle
        if self.queued and self.dirty and now - self.last_cycle >= cfg.min_cycle_interval_s:
            candidates.append(now)  # moved since the last cycle (a migration): place them now
        if self.resumes.next_round is not None:
            candidates.append(self.resumes.next_round)
        if self.stopping:
            candidates.append(min(at for at, _, _ in self.stopping.values()))  # a checkpoint written: the devices free
        if not candidates:
            return None  # queued work that can never start: nothing will change any more
        now = max(now, min(candidates))
        if cfg.max_time_s is not None and now > cfg.max_time_s:
            self.now = cfg.max_time_s
            return None
        return now

    def arrive(self) -> None:
        while self.next_arrival < len(self.arrivals) and self.arrivals[self.next_arrival].arrival_s <= self.now:
            self.dirty = True
            t = self.arrivals[self.next_arrival]
            self.queued[t.id] = QueuedTask(t.id, t.spec, EPOCH + timedelta(seconds=t.arrival_s))
            self.next_arrival += 1

    def finish(self) -> None:
        while self.ends and self.ends[0][0] <= self.now:
            _, _, task_id, attempt = heapq.heappop(self.ends)
            if task_id in self.running and attempt == self.attempts[task_id]:
                self.dirty = True
                self.release(task_id)
                self.outcomes[task_id].end_s = self.now

    def release(self, task_id: str) -> RunningTask:
        snap = self.snap
        rt, _, _ = self.running.pop(task_id)
        for a in rt.allocations:
            snap.release(snap.row_of(a.node, a.pool), a.device_indices, a.device_fraction, a.cpu, a.memory_gb)
            self.busy[a.pool] -= len(a.device_indices) * a.device_fraction
        return rt

    def cycle_at_once(self) -> bool:
        return self.again and self.last_cycle == self.now

    def cycle(self) -> None:
        cfg, now = self.cfg, self.now
        self.same_moment = self.same_moment + 1 if now == self.last_cycle else 1
        self.last_cycle, self.dirty = now, False
        book = self.quota_book()
        result = run_cycle(
            self.snap,
            list(self.queued.values()),
            self.sim.compat_check,
            EPOCH + timedelta(seconds=now),
            running=[rt for rt, _, _ in self.running.values()],
            queues=cfg.queues,
            policy=cfg.policy,
            tenant_weights=cfg.tenant_weights,
            models=self.sim.models,
            estimate=False,
            quota=book,
        )
        self.cycles += 1
        self.core_s += result.duration_s
        self.reservations = result.reservations
        if result.carried:
            self.dirty = True  # tasks the cycle did not reach (policy.max_heads_per_cycle): the next cycle goes on
        budget = (cfg.policy or SchedulingPolicySpec()).max_heads_per_cycle
        rotation = 2 + len(self.queued) // max(1, budget // 2) if budget else 2
        evicts = any(d.victims for d in result.decisions)
        self.again = bool(result.carried or evicts) and self.same_moment < rotation
        for decision in result.decisions:
            for victim in decision.victims:  # evict now; the victim starts over later
                if victim in self.running:
                    self.evict(victim)
            if decision.admit:
                # The book charged the admission in the cycle: it knows whether it borrows.
                borrowing = bool(book) and book.is_borrowing(decision.task_id)
                self.admissions.append(Admission(now, decision.task_id, borrowing))
                self.outcomes[decision.task_id].borrowed += borrowing
                self.start(decision)
            elif decision.explanation.reason in QUOTA_REASONS:
                self.outcomes[decision.task_id].over_quota_cycles += 1
            if not decision.admit:
                self.keep_promise(decision)
        deadlines = [q.preferred_wait.deadline() for q in self.queued.values() if q.preferred_wait is not None]
        self.promise_due = (min(deadlines) - EPOCH).total_seconds() + 1.0 if deadlines else None

    def keep_promise(self, decision) -> None:
        """A task waiting for its preferred model is held to the start it was promised, as
        live (where the server reads it back from the stored explanation): the promise goes
        with it to its next cycle, and that cycle is due once the promise breaks even if
        nothing else happens by then (see promises_due)."""
        item, expl = self.queued.get(decision.task_id), decision.explanation
        waiting = expl.reason == Reason.WAITING_FOR_PREFERRED
        promise = PreferredWait.from_explanation({"reason": expl.reason.value, **expl.facts}) if waiting else None
        if item is not None and item.preferred_wait != promise:
            self.queued[item.id] = replace(item, preferred_wait=promise)

    def promises_due(self) -> None:
        if self.promise_due is not None and self.promise_due <= self.now:
            self.dirty, self.promise_due = True, None

    def quota_book(self) -> QuotaBook | None:
        """A fresh book per cycle charged with the running work, as the live scheduler
        builds one from its database (so both agree on who borrows); None: no quotas."""
        if not self.cfg.quotas:
            return None
        book = QuotaBook(self.cfg.quotas, self.sim.models, self.pool_models)
        book.charge_running(rt for rt, _, _ in self.running.values())
        return book

    def evict(self, victim: str, migrated: bool = False) -> None:
        """Stop a running task: at once, or — checkpointed — once it has written its
        checkpoint (it holds its devices meanwhile, marked as being preempted, so the
        scheduler waits for them rather than evicting more)."""
        if victim in self.stopping:
            return
        checkpoint = self.tasks[victim].spec.checkpoint
        write_s = self.cfg.checkpoint_write_s if self.cfg.checkpoint_write_s is not None else (checkpoint.grace_s if checkpoint else 0.0)
        if checkpoint is None or not checkpoint.resume or write_s <= 0:
            self._stopped(victim, migrated, self.now)
            return
        rt, started, planned_end = self.running[victim]
        self.running[victim] = (replace(rt, being_preempted=True), started, planned_end)
        self.stopping[victim] = (self.now + write_s, self.now, migrated)

    def stops(self) -> None:
        """Checkpoints written by now: their tasks give the devices back (one that finished
        meanwhile has already)."""
        for task_id, (at, signalled, migrated) in sorted(self.stopping.items()):
            if at <= self.now:
                del self.stopping[task_id]
                if task_id in self.running:
                    self._stopped(task_id, migrated, signalled)

    def _stopped(self, victim: str, migrated: bool, signalled: float) -> None:
        """The task has given its devices back: requeue it (with the work done up to the
        moment it was signalled, if it checkpoints)."""
        self.dirty = True  # freed capacity: the next cycle places the preemptor
        _, started, planned_end = self.running[victim]
        stopped = self.release(victim)
        out = self.outcomes[victim]
        if migrated:
            out.migrations += 1
        else:
            out.preemptions += 1
        # Admission charged the whole run; the part never run is refunded,
        # the part run (and lost) stays charged.
        out.cost -= (planned_end - self.now) / 3600 * out.price_per_hour
        self.attempts[victim] += 1
        task = self.tasks[victim]
        spec = self.resumes.stopped(task, stopped, started, signalled)  # a checkpointed task goes back with the rest of its work
        self.queued[victim] = QueuedTask(victim, spec, EPOCH + timedelta(seconds=task.arrival_s))

    def start(self, decision) -> None:
        snap, now, models = self.snap, self.now, self.sim.models
        task = self.tasks[decision.task_id]
        placements = decision.assignment.placements
        for p in placements:
            snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)
            self.busy[p.pool] += len(p.device_indices) * p.device_fraction
        # A gang runs at the pace of its slowest worker; a resumed task only the rest of its work.
        full = max(self.truth(task, models.get(p.model) if p.device_indices else None) for p in placements)
        duration = self.resumes.duration(task.id, full)
        end = now + duration
        out = self.outcomes[task.id]
        out.start_s, out.pool, out.model = now, placements[0].pool, placements[0].model
        out.placements = [(p.node, p.pool, tuple(p.device_indices)) for p in placements]
        out.devices = sum(len(p.device_indices) * p.device_fraction for p in placements)
        out.price_per_hour = sum(p.price_per_hour for p in placements)
        out.fallback_used = decision.assignment.fallback_used
        out.cost += duration / 3600 * out.price_per_hour
        spec = self.queued[task.id].spec  # the task's own, or (resumed) with what is left of its estimate
        rank = Priority(task.spec.priority).rank
        allocations = tuple(Allocation(p.node, p.pool, p.device_indices, p.device_fraction, p.cpu, p.memory_gb) for p in placements)
        # What the scheduler expects — its estimate scaled to the devices, never the truth:
        # without an estimate the end is unknown, as in the server.
        expected_end = None if spec.runtime_estimate_s is None else EPOCH + timedelta(seconds=now + _scaled(spec, placements, models))
        preemptible = task.spec.preemptible and out.preemptions < self.max_preemptions
        started = EPOCH + timedelta(seconds=now)
        running = RunningTask(task.id, spec.tenant, rank, spec.task_type, allocations, started, expected_end, preemptible, env=spec.env.value)
        self.running[task.id] = (running, now, end)
        heapq.heappush(self.ends, (end, next(self.seq), task.id, self.attempts[task.id]))
        del self.queued[task.id]

    def snap_time(self) -> datetime:
        return EPOCH + timedelta(seconds=self.now)

    def migrate(self) -> None:
        """At a round boundary, move checkpointed tasks to faster idle devices (queues' migration rules)."""
        for task_id in self.resumes.moves():
            if task_id in self.running:
                self.evict(task_id, migrated=True)

    def sample(self) -> None:
        if not self.samples or self.cfg.sample_every_s <= 0 or self.now - self.samples[-1].t >= self.cfg.sample_every_s:
            self.samples.append(Sample(self.now, len(self.queued), len(self.running), dict(self.busy)))


def _scaled(spec: TaskSpec, placements, models) -> float:
    """What the scheduler expects (its estimate scaled to the devices), not the truth."""
    return max(runtime_on(spec, models.get(p.model)) or 0.0 for p in placements)
