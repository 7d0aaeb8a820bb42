"""Runs the workers in one background thread, one pass after another — on every replica,
but a pass runs only while this replica holds its group's lease (server/leader.py)."""

from __future__ import annotations

import logging
import threading
import time

from hetpool.server.leader import LeaderElector, LeadershipLost, fenced
from hetpool.server.metrics import worker_metrics
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.nodes import mark_offline
from hetpool.server.workers.approvals import expire_approvals
from hetpool.server.workers.audit_checkpoint import checkpoint_audit
from hetpool.server.workers.cost import accrue_usage
from hetpool.server.workers.dispatcher import dispatch_once
from hetpool.server.workers.reclaim import reclaim_once
from hetpool.server.workers.reconciler import reconcile_once
from hetpool.server.workers.scheduler import schedule_once

log = logging.getLogger(__name__)


WORKER_STEPS = (mark_offline, expire_approvals, schedule_once, dispatch_once, reconcile_once, reclaim_once, accrue_usage, checkpoint_audit)


def run_pass(ctx: ServiceContext, steps=WORKER_STEPS, still_leader=None) -> bool:
    """One scheduler → dispatcher → reconciler pass. Used by the loop and by tests.
    Returns False when leadership was lost (`still_leader()` false before a step, or a
    fenced write refused): the rest of the pass is left to the new leader."""
    metrics = worker_metrics(ctx)
    with metrics.counting_backend_errors():
        for step in steps:
            if still_leader is not None and not still_leader():
                return False
            started, wall = ctx.clock.now(), time.perf_counter()
            try:
                result = step(ctx)
            except LeadershipLost as exc:
                log.warning("worker step %s stopped: %s", step.__name__, exc)
                return False
            except Exception:  # a failing pass must not stop the loop; the next pass retries
                log.exception("worker step %s failed", step.__name__)
                metrics.step_failed(step.__name__)
                continue
            if step is schedule_once and result is not None:  # None: nothing was queued, no cycle ran
                metrics.cycle_done(ctx, result, time.perf_counter() - wall, started)
    return True


class WorkerLoop:
    def __init__(self, ctx: ServiceContext, interval_s: float, steps=WORKER_STEPS, name: str = "hetpool-workers", group: str | None = None) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.steps = steps
        self.elector = LeaderElector(ctx, group) if group else None  # None: no election (one process by construction)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader()

    def _still_leader(self) -> bool:
        return not self._stop.is_set() and self.is_leader()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                if self.elector is None:
                    run_pass(self.ctx, self.steps)
                elif self.elector.ensure():
                    with fenced(self.elector.fence):
                        completed = run_pass(self.ctx, self.steps, still_leader=self._still_leader)
                    if not completed and not self._stop.is_set():
                        self.elector.lost()
                self._stop.wait(max(0.0, self.interval_s - (time.monotonic() - started)))
        finally:
            if self.elector is not None:
                self.elector.release()  # a clean stop hands over at once instead of after the lease
