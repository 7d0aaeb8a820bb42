"""What a scheduling cycle reads from the database, loaded one way for two callers: the
scheduler worker, and `plan`, which runs the same `run_cycle` with the planned task added
to the queue. A plan therefore gives the verdict the scheduler's next cycle would give
(wait for a preferred model, blocked by a reservation, preempting, over quota), with the
same inputs: measured performance, learned runtimes, the promises waiting tasks were
given, and the quota book charged with the running work."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy.orm import Session

from hetpool.core.governance import APPROVED_OVER_QUOTA_LABEL
from hetpool.core.tasks import TaskSpec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.backfill import PreferredWait
from hetpool.scheduling.cycle import CycleResult, Decision, QueuedTask, run_cycle
from hetpool.scheduling.estimate import with_progress
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.db.models import TaskRow
from hetpool.server.services.active_work import active_work
from hetpool.server.services.cluster_state import inventory_at, live_snapshot, record_measured
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory
from hetpool.server.services.quota import quota_book
from hetpool.server.services.sched_state import apply_measured, learned_runtimes, measured_performance, running_tasks, with_runtime
from hetpool.server.services.task_planning import resolve_task_spec

PLANNED_TASK_ID = "(plan)"  # the planned task's id in the cycle a plan runs; never a real id ("t-…")


def quota_exempt(row: TaskRow) -> bool:
    """Approved to run over its quota: the approval leaves a label on the spec (there is no column)."""
    return (row.spec.get("labels") or {}).get(APPROVED_OVER_QUOTA_LABEL) == "true"


def set_aside_message(error: str) -> str:
    return f"set aside by the scheduler: evaluating this task raised {error}; the other tasks were scheduled without it"


@dataclass
class CycleLoad:
    """Everything `run_cycle` needs, as of one transaction."""

    inv: Inventory  # with measured performance written over the catalog's
    snap: Snapshot  # the live snapshot (a private copy), with the same measured performance
    queue: list[QueuedTask]
    invalid: list[tuple[str, str]]  # (task id, reason): queued tasks whose spec no longer resolves
    running: list[RunningTask]
    learned: dict[str, float]  # per template: learned runtime on the reference device
    book: QuotaBook | None

    def options(self) -> dict:
        """run_cycle's keyword arguments."""
        inv = self.inv
        return {
            "running": self.running,
            "queues": list(inv.queues.values()),
            "policy": inv.policy,
            "tenant_weights": inv.tenant_weights,
            "models": {m.name: m for m in inv.catalog.all()},
            "quota": self.book,
        }


@dataclass
class ResolvedSpecs:
    """Queued tasks' specs as resolved against the catalog, kept between cycles: resolving
    (validation, template defaults, catalog lookups) is most of a pass's CPU with thousands
    queued, and a queued task's spec changes only through a state transition (which moves
    its `updated_at`) or an inventory change (which moves the revision). Shared by the
    scheduler's pipeline and `plan` (API threads): guarded by a lock."""

    entries: dict[str, tuple[tuple, TaskSpec]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    resolved: int = 0  # specs resolved (not found here): for tests and metrics

    def get(self, inv: Inventory, inventory_key: tuple, row: TaskRow) -> TaskSpec:
        """`row`'s spec resolved against `inv`, which `inventory_key` names (revision and
        measured performance)."""
        key = (inventory_key, row.updated_at, row.attempt)
        with self.lock:
            found = self.entries.get(row.id)
        if found is not None and found[0] == key:
            return found[1]
        spec = resolve_task_spec(inv, {k: v for k, v in row.spec.items() if k != "kind"})
        with self.lock:
            self.entries[row.id] = (key, spec)
            self.resolved += 1
        return spec

    def keep_only(self, task_ids: set[str]) -> None:
        """Forget tasks no longer queued (called with the whole queue, by the scheduler)."""
        with self.lock:
            for task_id in [t for t in self.entries if t not in task_ids]:
                del self.entries[task_id]


def resolved_specs(ctx: ServiceContext) -> ResolvedSpecs:
    return ctx.process_state("resolved_specs", ResolvedSpecs)


def load_cycle(ctx: ServiceContext, session: Session, rows: list[TaskRow], now: datetime, *, whole_queue: bool = False) -> CycleLoad:
    """The cycle's inputs for the queued task rows `rows`: the inventory and the live
    snapshot from the cluster-state cache (one load for the scheduler and for plan).
    `whole_queue`: `rows` is every queued task (the scheduler's pass), so the resolved specs
    of tasks no longer queued are forgotten."""
    inv, revision = inventory_at(ctx, session)
    specs = resolved_specs(ctx)
    if whole_queue:
        specs.keep_only({row.id for row in rows})
    measured = measured_performance(session, inv)
    record_measured(ctx, measured)  # before the snapshot: it is built with these figures
    inv = apply_measured(inv, measured)
    inventory_key = (revision, repr(sorted((m, sorted(f.items())) for m, f in measured.items())))
    learned = learned_runtimes(session, inv)
    active = active_work(ctx).read(session)
    running = running_tasks(session, inv, learned, now, active)
    queue, invalid = [], []
    for row in rows:
        try:
            spec = specs.get(inv, inventory_key, row)
        except Exception as exc:  # inventory changed under the task, or a spec stored before a limit existed
            invalid.append((row.id, f"spec no longer valid: {exc}"))
            continue
        try:
            # A task waiting for its preferred model is held to the promise it was given.
            promise = PreferredWait.from_explanation(row.pending_explanation)
            queue.append(
                QueuedTask(
                    row.id,
                    with_progress(with_runtime(spec, learned), row.progress_s),
                    row.queued_at,
                    quota_exempt=quota_exempt(row),
                    preferred_wait=promise,
                )
            )
        except Exception as exc:
            invalid.append((row.id, set_aside_message(f"{type(exc).__name__}: {exc}")))
    book = quota_book(inv, running) if inv.quotas else None
    return CycleLoad(inv, live_snapshot(ctx, session, active), queue, invalid, running, learned, book)


def run_with_planned_task(ctx: ServiceContext, load: CycleLoad, spec: TaskSpec, now: datetime) -> Decision:
    """The decision the next cycle would make for `spec` were it queued now, behind `load.queue`.

    The forecast horizon covers the whole queue given, so that the planned task gets an
    estimated start wherever it lands (the scheduler's own horizon may be shorter)."""
    options = load.options()
    policy = options["policy"]
    horizon = max(policy.estimate_horizon or 0, len(load.queue) + 1)
    options["policy"] = policy.model_copy(update={"estimate_horizon": horizon})
    me = QueuedTask(PLANNED_TASK_ID, with_runtime(spec, load.learned), now)
    result: CycleResult = run_cycle(load.snap.with_own_memory(), [*load.queue, me], ctx.compat.check, now, **options)
    return next(d for d in result.decisions if d.task_id == PLANNED_TASK_ID)
