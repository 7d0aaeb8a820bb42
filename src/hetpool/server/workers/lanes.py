"""The dispatch pipeline's lanes: one small thread pool per (backend kind, cluster).

A submit can take seconds (`sbatch` against a busy controller, a Ray head restarting), so
the dispatch pipeline does not submit in its own thread: each round claims a batch of
admitted tasks (db/claims.py) and hands each to its lane, whose pool runs at most
`dispatch_concurrency_of(kind)` submits at once. A slow Slurm then fills the Slurm lane
only; Ray and local tasks keep going. A lane whose queue already holds as many tasks as
it runs at once is left out of the next claim, so a stuck engine does not collect the
whole admitted queue while other lanes could use it.

Each submit runs under the fence the round was claimed with (server/leader.py): a lane
thread that finds the lease taken records nothing and tells the pipelines to stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from hetpool.server.db.claims import ClaimSet
from hetpool.server.leader import LeadershipLost, current_fence, fenced
from hetpool.server.metrics import worker_metrics
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.wakeups import wake
from hetpool.server.workers.dispatcher import DispatchItem, claim_dispatch_batch, dispatch_item

log = logging.getLogger(__name__)


class DispatchLanes:
    def __init__(self, ctx: ServiceContext, on_leadership_lost: Callable[[], None] = lambda: None) -> None:
        self.ctx = ctx
        self.claims = ClaimSet()
        self._on_lost = on_leadership_lost
        self._pools: dict[tuple[str, str], ThreadPoolExecutor] = {}
        self._outstanding: Counter = Counter()  # per lane: queued + running
        self._idle = threading.Condition()

    def dispatch_round(self, ctx: ServiceContext) -> int:
        """The dispatch pipeline's step: claim a batch and queue it on its lanes; returns how
        many were queued (their outcome is recorded by the lane threads)."""
        items = claim_dispatch_batch(ctx, limit=ctx.settings.batch_of("dispatch"), claims=self.claims, skip_clusters=self._full_clusters())
        fence = current_fence()
        for item in items:
            self._queue(item, fence)
        return len(items)

    def outstanding(self) -> int:
        with self._idle:
            return sum(self._outstanding.values())

    def wait_idle(self, timeout_s: float) -> bool:
        """True once every queued submit has been recorded (tests, clean stop)."""
        deadline = time.monotonic() + timeout_s
        with self._idle:
            while sum(self._outstanding.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self) -> None:
        """Stop taking work; a submit in progress finishes in the background (its record
        is fenced, so after the lease is released it writes nothing)."""
        for pool in list(self._pools.values()):
            pool.shutdown(wait=False, cancel_futures=True)

    def _full_clusters(self) -> frozenset:
        with self._idle:
            return frozenset(
                cluster for (kind, cluster), n in self._outstanding.items() if cluster and n >= self.ctx.settings.dispatch_concurrency_of(kind)
            )

    def _queue(self, item: DispatchItem, fence) -> None:
        lane = item.lane
        with self._idle:
            pool = self._pools.get(lane)
            if pool is None:
                workers = self.ctx.settings.dispatch_concurrency_of(lane[0])
                pool = self._pools[lane] = ThreadPoolExecutor(workers, thread_name_prefix=f"hetpool-dispatch-{lane[0]}-{lane[1] or '-'}")
            self._outstanding[lane] += 1
        try:
            pool.submit(self._run, item, fence)
        except RuntimeError:  # shut down meanwhile: the task stays admitted for the next leader
            self._done(item)

    def _run(self, item: DispatchItem, fence) -> None:
        metrics = worker_metrics(self.ctx)
        try:
            with fenced(fence), audit.linked_at_commit(), metrics.counting_backend_errors():
                if dispatch_item(self.ctx, item):
                    wake(self.ctx, "reconcile")  # follow the job from its start
        except LeadershipLost as exc:
            log.warning("dispatch of %s not recorded: %s", item.task_id, exc)
            self._on_lost()
        except Exception:  # one task's failure is its own; the lane goes on
            log.exception("dispatch of %s failed", item.task_id)
            metrics.step_failed("dispatch_item")
        finally:
            self._done(item)

    def _done(self, item: DispatchItem) -> None:
        self.claims.release([item.task_id])
        with self._idle:
            self._outstanding[item.lane] -= 1
            if self._outstanding[item.lane] <= 0:
                del self._outstanding[item.lane]
            self._idle.notify_all()
