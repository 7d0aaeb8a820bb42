"""Prometheus metrics: GET /metrics in the text exposition format.

Two sources:
- gauges computed at scrape time from the database (a custom collector): devices per pool
  by status, queue lengths, tasks by state, tasks whose deadline is at risk,
  nodes by state, backend health. They are always current, and a restarted server reports
  the same numbers;
- histograms and counters fed by the worker loop (workers/loop.py): waits of admitted
  tasks, scheduling cycle latency, worker step failures, backend errors. They live on the
  service context — the worker loop only has the context — and start from zero with
  the process, as Prometheus expects of counters.

Each app has its own CollectorRegistry (never prometheus_client's global one), so many
apps in one process (tests, embedded servers) neither collide nor see each other's
samples. docs/operations-metrics.md lists every metric.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter as Tally
from contextlib import contextmanager
from datetime import datetime

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy import select

from hetpool.core.states import TaskState
from hetpool.server.db.models import NodeStatusRow, TaskRow
from hetpool.server.services import deadlines, stats
from hetpool.server.services.cluster_state import live_snapshot, read_inventory
from hetpool.server.services.context import ServiceContext

log = logging.getLogger(__name__)

# Waits run from seconds (an idle pool) to days (a saturated one).
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400, 259200, float("inf"))
# A cycle is milliseconds on a small estate, seconds on a big queue.
CYCLE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, float("inf"))

# The workers catch backend failures themselves (a failing engine must not stop the loop)
# and only log them; these are the log lines that mean "a backend call failed", by
# (logger, message format) → the operation that failed. Counting their records keeps the
# workers free of metrics code; tests/server/test_metrics.py pins the formats.
BACKEND_ERROR_LOGS = {
    ("hetpool.server.workers.reconciler", "backend %s of cluster %s %s: %s"): "poll",
    ("hetpool.server.workers.dispatcher", "dispatch of %s to %s failed (%s): %s"): "dispatch",
    ("hetpool.server.services.connector_sync", "sync of %s failed"): "sync",
}


class WorkerMetrics:
    """What the worker loop observes for one service context."""

    def __init__(self) -> None:
        # registry=None: not registered anywhere; each app's collector reads them.
        self.task_wait = Histogram(
            "hetpool_task_wait_seconds",
            "Time from entering the queue to admission, observed when the scheduler admits a task",
            ["pool", "task_type"],
            buckets=WAIT_BUCKETS,
            registry=None,
        )
        self.cycle = Histogram(
            "hetpool_scheduling_cycle_seconds",
            "Wall time of one scheduling cycle (load, decide, record) with tasks in the queue",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self.step_errors = Counter("hetpool_worker_step_errors", "Worker steps that raised (the loop goes on)", ["step"], registry=None)
        self.rounds = Histogram(
            "hetpool_worker_round_seconds",
            "Wall time of one round of a worker pipeline (server/workers/loop.py), per pipeline",
            ["pipeline"],
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self.backend_errors = Counter(
            "hetpool_backend_errors", "Backend calls that failed in the workers (dispatch, poll, inventory sync)", ["operation"], registry=None
        )
        for operation in sorted(set(BACKEND_ERROR_LOGS.values())):  # shown at 0 from the start, so rate() works
            self.backend_errors.labels(operation=operation)

    def collectors(self) -> tuple:
        return (self.task_wait, self.cycle, self.step_errors, self.backend_errors, self.rounds)

    def round_done(self, pipeline: str, seconds: float) -> None:
        self.rounds.labels(pipeline=pipeline).observe(seconds)

    def step_failed(self, step: str) -> None:
        self.step_errors.labels(step=step).inc()

    def cycle_done(self, ctx: ServiceContext, result, seconds: float, started_at: datetime) -> None:
        """One scheduling cycle ran: its latency, and the waits of the tasks it admitted."""
        self.cycle.observe(seconds)
        admitted = {d.task_id: d.assignment.placements[0].pool for d in result.decisions if d.admit and d.assignment.placements}
        if not admitted:
            return
        try:
            with ctx.db.transaction() as session:
                rows = session.execute(
                    select(TaskRow.id, TaskRow.task_type, TaskRow.queued_at, TaskRow.admitted_at).where(
                        TaskRow.id.in_(list(admitted)), TaskRow.queued_at.is_not(None), TaskRow.admitted_at >= started_at
                    )
                ).all()
        except Exception:  # metrics must never break scheduling
            log.exception("could not read the waits of admitted tasks")
            return
        for task_id, task_type, queued_at, admitted_at in rows:
            wait = (admitted_at - queued_at).total_seconds()
            self.task_wait.labels(pool=admitted[task_id], task_type=task_type).observe(max(0.0, wait))

    @contextmanager
    def counting_backend_errors(self):
        """Count the backend-failure log lines the workers write on this thread meanwhile."""
        previous = getattr(_sink, "metrics", None)
        _sink.metrics = self
        try:
            yield self
        finally:
            _sink.metrics = previous


_sink = threading.local()  # the WorkerMetrics of the pass running on this thread
_lock = threading.Lock()


class _BackendErrorLogCounter(logging.Filter):
    """Counts the records; a filter, not a handler, so that where no logging is configured
    Python still prints these warnings (a handler on the logger would silence that)."""

    def filter(self, record: logging.LogRecord) -> bool:
        metrics = getattr(_sink, "metrics", None)
        operation = BACKEND_ERROR_LOGS.get((record.name, record.msg)) if isinstance(record.msg, str) else None
        if metrics is not None and operation:
            metrics.backend_errors.labels(operation=operation).inc()
        return True  # never drops a record


_COUNTER = _BackendErrorLogCounter()
for _logger_name in {name for name, _ in BACKEND_ERROR_LOGS}:
    _logger = logging.getLogger(_logger_name)
    if _COUNTER not in _logger.filters:
        _logger.addFilter(_COUNTER)


def worker_metrics(ctx: ServiceContext) -> WorkerMetrics:
    return ctx.process_state("worker_metrics", WorkerMetrics)


class HetpoolCollector:
    """Gauges read from the database at each scrape, plus the worker loop's series."""

    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx

    def describe(self):
        return []  # computed at scrape time; nothing to check at registration

    def collect(self):
        try:
            yield from self._from_database()
            up = 1
        except Exception:  # a scrape still answers: say the database part failed
            log.exception("metrics: reading the database failed")
            up = 0
        yield GaugeMetricFamily("hetpool_database_up", "1 when the last scrape could read the database", value=up)
        for collector in worker_metrics(self.ctx).collectors():
            yield from collector.collect()

    def _from_database(self):
        ctx = self.ctx
        with ctx.db.transaction() as session:
            inv = read_inventory(ctx, session)
            snap = live_snapshot(ctx, session)
            pools = stats.pool_rows(snap)
            waiting = stats.waiting_tasks(ctx, session, inv, snap, None)
            at_risk = len(deadlines.at_risk(ctx, session, waiting.tasks, None))
            states = stats.state_counts(session, None)
            backends = stats.backend_health(session, inv)
            node_states = {r.node: r.state for r in session.execute(select(NodeStatusRow)).scalars()}
        # Whatever the collector yields is all families with complete samples: build them first.
        families = []
        labels = ["pool", "cluster", "model", "device_class"]
        per_state = {
            "total": ("hetpool_pool_devices", "Devices in the pool"),
            "busy": ("hetpool_pool_devices_busy", "Devices of the pool held (wholly or partly) by tasks or the engine's own work"),
            "idle": ("hetpool_pool_devices_idle", "Wholly free devices on ready nodes"),
            "abnormal": ("hetpool_pool_devices_abnormal", "Devices their agent reports abnormal"),
            "offline": ("hetpool_pool_devices_offline", "Devices on nodes that are not ready (offline, draining, down) or cordoned"),
        }
        for key, (name, text) in per_state.items():
            family = GaugeMetricFamily(name, text, labels=labels)
            for p in pools:
                family.add_metric([p["pool"], p["cluster"], p["model"], p["class"]], p[key])
            families.append(family)
        ratio = GaugeMetricFamily("hetpool_pool_utilisation_ratio", "Busy devices / devices of the pool, now", labels=labels)
        for p in pools:
            ratio.add_metric([p["pool"], p["cluster"], p["model"], p["class"]], p["utilisation"])
        families.append(ratio)

        by_queue = Tally({"default": 0, **dict.fromkeys(inv.queues, 0)})
        by_pool = Tally(dict.fromkeys((p["pool"] for p in pools), 0))
        for shape in waiting.shapes.values():
            by_queue[shape.queue] += shape.count
            for pool in shape.pools:
                by_pool[pool] += shape.count
        queue_family = GaugeMetricFamily("hetpool_queue_length", "Queued tasks per scheduling queue", labels=["queue"])
        for queue, n in sorted(by_queue.items()):
            queue_family.add_metric([queue], n)
        pool_queue = GaugeMetricFamily(
            "hetpool_pool_queue_length", "Queued tasks that could run on the pool (a task counts in each such pool)", labels=["pool"]
        )
        for pool, n in sorted(by_pool.items()):
            pool_queue.add_metric([pool], n)
        families += [queue_family, pool_queue]

        tasks = GaugeMetricFamily("hetpool_tasks", "Tasks per state", labels=["state"])
        for state in TaskState:
            tasks.add_metric([state.value], states.get(state.value, 0))
        families.append(tasks)

        risk = GaugeMetricFamily(
            "hetpool_tasks_deadline_at_risk",
            "Unfinished tasks whose deadline cannot be met as things stand (queued: estimated start + runtime;"
            " placed: start + runtime; or the deadline has passed); per tenant: /api/v1/stats/workload",
        )
        risk.add_metric([], at_risk)
        families.append(risk)

        nodes = GaugeMetricFamily(
            "hetpool_nodes", "Nodes per cluster and state (a node nothing reports on counts as ready)", labels=["cluster", "state"]
        )
        node_counts = Tally((node.cluster, node_states.get(name, "ready")) for name, node in inv.nodes.items())
        for (cluster, state), n in sorted(node_counts.items()):
            nodes.add_metric([cluster, state], n)
        families.append(nodes)

        up = GaugeMetricFamily(
            "hetpool_backend_up",
            "1 when the cluster's backend answers (last connector sync ok, no task it cannot follow)",
            labels=["cluster", "backend"],
        )
        for b in backends:
            up.add_metric([b["cluster"], b["backend"]], 1 if b["up"] else 0)
        families.append(up)
        return families


def registry_for(app: FastAPI) -> CollectorRegistry:
    registry = getattr(app.state, "metrics_registry", None)
    if registry is None:
        with _lock:
            registry = getattr(app.state, "metrics_registry", None)
            if registry is None:
                registry = CollectorRegistry(auto_describe=False)
                registry.register(HetpoolCollector(app.state.ctx))
                app.state.metrics_registry = registry
    return registry


router = APIRouter(tags=["meta"])


# Unauthenticated, like /healthz: Prometheus scrapes it with no hetpool token, and what it
# shows is operational and aggregate — device counts per pool, queue lengths, counts per
# state, latencies, backend health. No task names, commands, images or users are exposed;
# labels are pools, clusters, models, device classes, queues, task types and states — never
# a tenant (hetpool_tasks_deadline_at_risk is one total; per tenant it is in the
# authenticated /api/v1/stats/workload).
@router.get("/metrics", summary="Prometheus metrics (text format; no token needed)", response_class=Response)
def metrics(request: Request) -> Response:
    return Response(generate_latest(registry_for(request.app)), media_type=CONTENT_TYPE_LATEST)
