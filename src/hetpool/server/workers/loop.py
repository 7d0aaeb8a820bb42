"""The worker pipelines: schedule, dispatch, reconcile, reclaim, cost and housekeeping,
each in its own thread with its own interval (dstack's background-task shape), so one slow
engine call delays only its own pipeline: a 30 s `sbatch` holds up dispatch to that
cluster (workers/lanes.py), while scheduling and reconciling go on.

Leadership: every replica starts the pipelines; they run only while this replica holds
the one "workers" lease (server/leader.py). A lease thread renews it; each pipeline round
runs under the fence read at its start, and every write checks it (`check_fence`), so a
replica that lost the lease mid-round records nothing. One lease for all pipelines keeps
the guarantee simple: the scheduler's admissions and the dispatcher's submits are never
split between two replicas.

Each pipeline takes bounded batches (db/claims.py; `worker_batch`, `pipeline_batch`)
and fails alone: an exception is logged and counted, and the next round retries.

`run_pass(ctx)` drives one round of every pipeline, in order, in the caller's thread: the
deterministic form tests and tools use. `WorkerLoop` runs a list of steps in one thread
(the connector sync, which has its own lease).
"""

from __future__ import annotations

import logging
import threading
import time

from hetpool.server.leader import WORKERS, LeaderElector, LeadershipLost, fenced
from hetpool.server.metrics import worker_metrics
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline
from hetpool.server.services.wakeups import wakeups
from hetpool.server.workers.approvals import expire_approvals
from hetpool.server.workers.audit_checkpoint import checkpoint_audit
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.lanes import DispatchLanes
from hetpool.server.workers.migration import migrate_once
from hetpool.server.workers.reclaim import reclaim_once
from hetpool.server.workers.reconciler import reconcile_once
from hetpool.server.workers.scheduler import schedule_once

log = logging.getLogger(__name__)


# The pipelines and their steps; one thread each in WorkerPipelines. Housekeeping gathers
# the cheap periodic steps (node liveness, approval expiry, audit checkpoints).
PIPELINE_STEPS = {
    "housekeeping": (mark_offline, expire_approvals, checkpoint_audit),
    "schedule": (schedule_once, migrate_once),
    "dispatch": (dispatch_once,),  # in WorkerPipelines: DispatchLanes.dispatch_round
    "reconcile": (reconcile_once,),
    "reclaim": (reclaim_once,),
    "cost": (accrue_usage,),
}
# One round of every pipeline, in the order a task moves through them (run_pass).
WORKER_STEPS = (
    mark_offline,
    expire_approvals,
    schedule_once,
    migrate_once,
    dispatch_once,
    reconcile_once,
    reclaim_once,
    accrue_usage,
    checkpoint_audit,
)


def run_pass(ctx: ServiceContext, steps=WORKER_STEPS, still_leader=None, pipeline: str | None = None) -> bool:
    """Run `steps` once, in order (by default one round of every pipeline). Used by the
    pipeline threads and by tests. Returns False when leadership was lost (`still_leader()`
    false before a step, or a fenced write refused): the rest is left to the new leader."""
    metrics = worker_metrics(ctx)
    wall = time.perf_counter()
    with metrics.counting_backend_errors():
        for step in steps:
            if still_leader is not None and not still_leader():
                return False
            started, step_wall = ctx.clock.now(), time.perf_counter()
            try:
                result = step(ctx)
            except LeadershipLost as exc:
                log.warning("worker step %s stopped: %s", step.__name__, exc)
                return False
            except Exception:  # a failing step must not stop its pipeline; the next round retries
                log.exception("worker step %s failed", step.__name__)
                metrics.step_failed(step.__name__)
                continue
            if step is schedule_once and result is not None:  # None: nothing was queued, no cycle ran
                metrics.cycle_done(ctx, result, time.perf_counter() - step_wall, started)
    if pipeline is not None:
        metrics.round_done(pipeline, time.perf_counter() - wall)
    return True


class LeaseHolder:
    """Renews (or tries to take) a lease on its own thread, so that a pass of any length
    never outlives it: a leader that renewed only between passes would lose its lease
    in the middle of a pass longer than the lease (a big cycle, a slow engine)."""

    def __init__(self, ctx: ServiceContext, elector: LeaderElector, stop: threading.Event, on_won=None) -> None:
        self.ctx, self.elector, self._stop, self._on_won = ctx, elector, stop, on_won
        self.thread = threading.Thread(target=self._run, name=f"hetpool-lease-{elector.group}", daemon=True)

    def _run(self) -> None:
        # ensure() renews (or tries to take) the lease once per leader_renew_s; waking more
        # often only notices a lost lease sooner.
        poll = min(1.0, max(0.05, self.ctx.settings.leader_renew_s / 4))
        leading = False
        while not self._stop.is_set():
            now_leading = self.elector.ensure()
            if now_leading and not leading and self._on_won is not None:
                self._on_won()
            leading = now_leading
            self._stop.wait(poll)


class WorkerLoop:
    def __init__(self, ctx: ServiceContext, interval_s: float, steps=WORKER_STEPS, name: str = "hetpool-workers", group: str | None = None) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.steps = steps
        self.elector = LeaderElector(ctx, group) if group else None  # None: no election (one process by construction)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._lease = LeaseHolder(ctx, self.elector, self._stop) if self.elector else None

    def start(self) -> None:
        if self._lease is not None:
            self._lease.thread.start()
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)
        if self._lease is not None:
            self._lease.thread.join(timeout)
            self.elector.release()  # a clean stop hands over at once instead of after the lease

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _still_leader(self) -> bool:
        return not self._stop.is_set() and self.is_leader()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            if self.elector is None:
                run_pass(self.ctx, self.steps)
            elif (fence := self.elector.fence) is None:
                self._stop.wait(min(self.interval_s, 0.1))  # a standby: start as soon as the lease is won
                continue
            else:
                with fenced(fence), audit.linked_at_commit():
                    completed = run_pass(self.ctx, self.steps, still_leader=self._still_leader)
                if not completed and not self._stop.is_set():
                    self.elector.lost()
            self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))


class WorkerPipelines:
    """The pipelines of PIPELINE_STEPS, one thread each, plus the thread that holds the
    "workers" lease; the API's /readyz and /api/v1/leader read `elector` and `is_leader`."""

    def __init__(self, ctx: ServiceContext, group: str = WORKERS, holder: str | None = None) -> None:
        self.ctx = ctx
        self.elector = LeaderElector(ctx, group, holder)
        self.lanes = DispatchLanes(ctx, on_leadership_lost=self.elector.lost)
        self._stop = threading.Event()
        steps = dict(PIPELINE_STEPS, dispatch=(self.lanes.dispatch_round,))
        # A new leader starts every pipeline now, not after its interval.
        lease = LeaseHolder(ctx, self.elector, self._stop, on_won=lambda: wakeups(ctx).wake_all())
        self._threads = [lease.thread] + [
            threading.Thread(target=self._run, args=(name, tuple(pipeline)), name=f"hetpool-{name}", daemon=True) for name, pipeline in steps.items()
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every pipeline, then release the lease (a standby takes over at once). A
        submit still blocked in an engine is left behind: its record is fenced."""
        self._stop.set()
        wakeups(self.ctx).wake_all()  # no pipeline sleeps out its interval
        deadline = time.monotonic() + timeout
        self.lanes.shutdown()
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self.lanes.wait_idle(max(0.0, deadline - time.monotonic()))
        self.elector.release()

    def is_leader(self) -> bool:
        return self.elector.is_leader()

    def _still_leader(self) -> bool:
        return not self._stop.is_set() and self.elector.is_leader()

    def _run(self, name: str, steps: tuple) -> None:
        interval = self.ctx.settings.interval_of(name)
        signals = wakeups(self.ctx)
        while not self._stop.is_set():
            started = time.monotonic()
            fence = self.elector.fence
            if fence is not None:
                with fenced(fence), audit.linked_at_commit():
                    completed = run_pass(self.ctx, steps, still_leader=self._still_leader, pipeline=name)
                if not completed and not self._stop.is_set():
                    self.elector.lost()
            took = time.monotonic() - started
            # Next round when woken (services/wakeups.py) or after the interval; either way
            # not before a gap as long as this round took: at most half a thread's time.
            self._stop.wait(min(took, interval))
            signals.wait(name, max(0.0, interval - (time.monotonic() - started)))
