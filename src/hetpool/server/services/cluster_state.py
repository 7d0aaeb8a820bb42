"""One per-process cache of the cluster's state, shared by the API threads and the workers:
the inventory, the idle snapshot (what could ever fit), the live snapshot (what is free
now) and the submit path's per-shape admission verdicts.

Everything is keyed by the inventory revision, a counter the database bumps on every
write to an inventory object (migration 20261201_0011), so no write path can leave a
cached copy behind and a delete followed by a create never looks like "no change". Node
liveness and device health are read on every use and are part of the live snapshot's key
(the idle estate submit checks against ignores them: what is down now may be back).

The live snapshot is kept up to date by allocation deltas: each caller reads the active
placements in its own transaction, and the cached snapshot is brought to exactly that set
(workers that started or ended since are taken or released). Deltas are applied to a
private copy that then replaces the cached one under the lock (copy-on-write), and every
caller gets a copy of its own, so no thread ever sees a snapshot that another one changes.

Callers get shallow copies of the inventory's maps and must not change the specs in them.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.inventory import TaskType
from hetpool.core.tasks import TaskSpec
from hetpool.scheduling.snapshot import Allocation, Snapshot, build_snapshot
from hetpool.server.db.models_revision import InventoryRevisionRow
from hetpool.server.services.active_work import ActiveTask, active_work
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, load_inventory
from hetpool.server.services.nodes import engine_busy, health_view
from hetpool.server.services.sched_state import apply_measured

T = TypeVar("T")
MAX_VERDICTS = 4096  # per-shape admission verdicts kept (a sweep submits a handful of shapes)
# Task fields that cannot change where a task could be placed or what quota it is charged:
# left out of the shape key, so that a sweep of differently named commands shares one verdict.
NOT_SHAPE = {"name", "command", "env_vars", "labels", "runtime_estimate", "max_runtime"}
Measured = dict[str, dict[TaskType, float]]


@dataclass
class ClusterState:
    """The cached state; the functions below fill and check it (one per ServiceContext)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    revision: int | None = None
    inventory: Inventory | None = None
    # Measured relative performance (the scheduler records it each cycle): written over the
    # catalog's in the live snapshot, so every caller sees the figures the scheduler uses.
    measured: Measured = field(default_factory=dict)
    measured_key: str = ""
    idle_key: tuple | None = None
    idle: Snapshot | None = None
    live_key: tuple | None = None
    live: Snapshot | None = None
    held: dict[tuple[str, int, int], Allocation] = field(default_factory=dict)
    verdicts_key: tuple | None = None
    verdicts: OrderedDict = field(default_factory=OrderedDict)
    # How often each was computed in full (tests and benchmarks look).
    inventory_loads: int = 0
    live_rebuilds: int = 0
    verdict_misses: int = 0


def cluster_state(ctx: ServiceContext) -> ClusterState:
    return ctx.process_state("cluster_state", ClusterState)


def inventory_revision(session: Session) -> int:
    return session.execute(select(InventoryRevisionRow.revision).where(InventoryRevisionRow.id == 1)).scalar_one()


def inventory_at(ctx: ServiceContext, session: Session) -> tuple[Inventory, int]:
    """The inventory as of this transaction, and its revision. The revision is read first:
    an inventory loaded after a later commit is only ever newer than its key, and the next
    caller, seeing the new revision, loads it again."""
    state = cluster_state(ctx)
    revision = inventory_revision(session)
    with state.lock:
        if state.inventory is not None and state.revision == revision:
            return _copy(state.inventory), revision
    inv = load_inventory(ctx, session)
    with state.lock:
        if state.revision is None or revision >= state.revision:
            state.inventory, state.revision = inv, revision
        state.inventory_loads += 1
    return _copy(inv), revision


def read_inventory(ctx: ServiceContext, session: Session) -> Inventory:
    """The inventory for a caller that does not need its revision."""
    return inventory_at(ctx, session)[0]


def _copy(inv: Inventory) -> Inventory:
    return Inventory(
        catalog=inv.catalog,
        clusters=dict(inv.clusters),
        nodes=dict(inv.nodes),
        pools=dict(inv.pools),
        tenants=dict(inv.tenants),
        templates=dict(inv.templates),
        queues=dict(inv.queues),
        policies=dict(inv.policies),
        quotas=dict(inv.quotas),
        governance={kind: dict(objects) for kind, objects in inv.governance.items()},
        custom_models=dict(inv.custom_models),
        invalid=dict(inv.invalid),
    )


def _health_key(offline: set[str], broken: dict[str, set[int]]) -> tuple:
    return tuple(sorted(offline)), tuple(sorted((n, tuple(sorted(d))) for n, d in broken.items()))


def _build(inv: Inventory, allocations: list[Allocation], offline, broken, external=None) -> Snapshot:
    models = {m.name: m for m in inv.catalog.all()}
    return build_snapshot(
        list(inv.clusters.values()),
        list(inv.nodes.values()),
        list(inv.pools.values()),
        models,
        allocations,
        unhealthy_nodes=offline,
        unhealthy_devices=broken,
        external_busy=external or {},
    )


def idle_snapshot(ctx: ServiceContext, session: Session, inv: Inventory, revision: int) -> tuple[Snapshot, tuple]:
    """The estate as configured, with nothing allocated and every node and device taken as
    healthy, and the key it is valid for (the inventory revision). Submit's "could it ever
    fit?" asks this one: a node that is down, drained or unreachable now (an engine's
    controller restarting, say) or a device reported abnormal may be back, and a task that
    only they could run waits for them rather than being refused. The scheduler still places
    nothing there while they are unhealthy, and says so in the task's explanation."""
    state = cluster_state(ctx)
    key = (revision,)
    with state.lock:
        if state.idle is not None and state.idle_key == key:
            return state.idle.emptied(), key
    snap = _build(inv, [], set(), {})
    with state.lock:
        state.idle, state.idle_key = snap, key
    return snap.emptied(), key


def admission_verdict(ctx: ServiceContext, idle_key: tuple, what: str, spec: TaskSpec, compute: Callable[[], T]) -> T:
    """`compute()` for this task shape (its placement-relevant fields, tenant included), on
    the idle estate of `idle_key`, remembered until the inventory or node health changes.
    `what` names the check ("fit", "quota"). A verdict is computed outside the lock: two
    threads may both compute the same one, never a different one."""
    state = cluster_state(ctx)
    shape = json.dumps(spec.model_dump(mode="json", exclude=NOT_SHAPE), sort_keys=True)
    key = (what, shape)
    with state.lock:
        if state.verdicts_key == idle_key and key in state.verdicts:
            state.verdicts.move_to_end(key)
            return state.verdicts[key]
    value = compute()
    with state.lock:
        if state.verdicts_key != idle_key:
            state.verdicts, state.verdicts_key = OrderedDict(), idle_key
        state.verdicts[key] = value
        state.verdict_misses += 1
        while len(state.verdicts) > MAX_VERDICTS:
            state.verdicts.popitem(last=False)
    return value


def record_measured(ctx: ServiceContext, measured: Measured) -> None:
    """Measured relative performance as of the caller's cycle load (cycle_inputs)."""
    state = cluster_state(ctx)
    key = repr(sorted((m, sorted(f.items())) for m, f in measured.items()))
    with state.lock:
        state.measured, state.measured_key = measured, key


def active_placements(active: list[ActiveTask]) -> dict[tuple[str, int, int], Allocation]:
    """What admitted, dispatched and running work holds: (task, attempt, rank) → allocation."""
    return {(task.id, task.attempt, h.rank): h.allocation for task in active for h in task.fixed.held}


def live_snapshot(ctx: ServiceContext, session: Session, active: list[ActiveTask] | None = None) -> Snapshot:
    """The estate as of this transaction: a private copy, free to change. `active`: the
    active tasks as the caller read them in this transaction (else read here)."""
    state = cluster_state(ctx)
    inv, revision = inventory_at(ctx, session)
    active = active_placements(active_work(ctx).read(session) if active is None else active)
    offline, broken, engine_used = health_view(session)  # offline nodes and abnormal devices never take work
    external = engine_busy(engine_used, active.values(), inv.pools)
    with state.lock:
        measured, measured_key = state.measured, state.measured_key
        key = (revision, measured_key, *_health_key(offline, broken), tuple(sorted((n, tuple(sorted(m.items()))) for n, m in external.items())))
        if state.live is not None and state.live_key == key:
            snap = state.live.copy()  # the cached one is never changed in place: a copy takes the deltas
            for gone in state.held.keys() - active.keys():
                _apply(snap, state.held[gone], release=True)
            for new in active.keys() - state.held.keys():
                _apply(snap, active[new], release=False)
            state.live, state.held = snap, active
            return snap.copy()
    snap = _build(apply_measured(inv, measured), list(active.values()), offline, broken, external)
    with state.lock:
        state.live, state.live_key, state.held = snap, key, active
        state.live_rebuilds += 1
    return snap.copy()


def recent_live_snapshot(ctx: ServiceContext, session: Session) -> Snapshot:
    """The live snapshot as of the last caller's load (the scheduler's, at most a cycle
    ago), without reading allocations again, while the inventory has not changed since;
    else a fresh one. For checks at submit that look at the live estate (the reserved-pool
    approval rule): they judge the moment of submission, which a cycle old view serves as
    well, and a submit then reads no allocations."""
    state = cluster_state(ctx)
    revision = inventory_revision(session)
    with state.lock:
        if state.live is not None and state.live_key is not None and state.live_key[0] == revision:
            return state.live.copy()
    return live_snapshot(ctx, session)


def _apply(snap: Snapshot, a: Allocation, *, release: bool) -> None:
    sign = -1.0 if release else 1.0
    row = snap.row_of(a.node, a.pool)
    if row is not None:
        snap.take(row, a.device_indices, sign * a.device_fraction, sign * a.cpu, sign * a.memory_gb)
    elif a.node in snap.node_by_name:
        n = snap.node_by_name[a.node]
        snap.free_cpu[n] -= sign * a.cpu
        snap.free_mem[n] -= sign * a.memory_gb
