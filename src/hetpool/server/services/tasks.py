"""Tasks: plan, submit, the state machine's one writer, cancel, read, logs."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.orm import Session

from hetpool.core.errors import BudgetExceededError, ConflictError, NotFoundError, SpecError
from hetpool.core.specs import parse_spec, spec_to_document
from hetpool.core.states import ACTIVE_STATES, TaskState, check_transition
from hetpool.core.tasks import TaskSpec, apply_template
from hetpool.core.tenancy import tenant_ancestors
from hetpool.core.units import format_duration
from hetpool.scheduling.assign import assign
from hetpool.scheduling.estimate import cost_per_hour, runtime_on
from hetpool.scheduling.explain import explanation
from hetpool.scheduling.snapshot import Allocation, Snapshot, build_snapshot
from hetpool.server.db.models import AuditEventRow, PlacementRow, TaskRow
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, load_inventory


class UnschedulableError(SpecError):
    """The task could not run on any pool even if everything were idle."""

    code = "unschedulable"


def new_task_id() -> str:
    return "t-" + secrets.token_hex(5)


def aware(ts: datetime | None) -> datetime | None:
    if ts is None:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


def resolve_task_spec(inv: Inventory, raw: dict[str, Any]) -> TaskSpec:
    """Raw task fields → TaskSpec, with the template's defaults and references checked."""
    if not isinstance(raw, dict):
        raise SpecError("a task is a mapping with kind: Task")
    raw = {"kind": "Task", **raw}
    template_name = raw.get("template")
    if template_name:
        template = inv.templates.get(template_name)
        if template is None:
            known = ", ".join(sorted(inv.templates)) or "none"
            raise SpecError(
                f"template: unknown template {template_name!r}; known: {known}",
                details=[{"loc": "template", "msg": f"unknown template; known: {known}"}],
            )
        raw = apply_template(raw, template)
    spec = parse_spec(raw)
    if spec.tenant not in inv.tenants:
        # The caller may submit to this path, so it holds a role on an existing ancestor (or
        # everywhere): offer that ancestor's subtree, never every team of the estate.
        root = next((t for t in reversed(tenant_ancestors(spec.tenant)) if t in inv.tenants), None)
        known = ", ".join(sorted(t for t in inv.tenants if root is None or t == root or t.startswith(root + "/"))) or "none"
        raise SpecError(f"tenant: unknown tenant {spec.tenant!r}; known: {known}", details=[{"loc": "tenant", "msg": "unknown tenant"}])
    if spec.queue and spec.queue != "default" and spec.queue not in inv.queues:
        known = ", ".join(["default", *sorted(inv.queues)])
        raise SpecError(f"queue: unknown queue {spec.queue!r}; known: {known}", details=[{"loc": "queue", "msg": f"unknown queue; known: {known}"}])
    if spec.per_worker.devices is not None:
        for i, model in enumerate(spec.per_worker.devices.models):
            if model not in inv.catalog:
                raise SpecError(f"per_worker.devices.models[{i}]: unknown device model {model!r}")
    return spec


def active_allocations(session: Session) -> list[Allocation]:
    rows = session.execute(
        select(PlacementRow)
        .join(TaskRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt))
        .where(TaskRow.state.in_([s.value for s in ACTIVE_STATES]))
    ).scalars()
    return [
        Allocation(
            node=r.node, pool=r.pool, device_indices=tuple(r.device_indices), device_fraction=r.device_fraction, cpu=r.cpu, memory_gb=r.memory_gb
        )
        for r in rows
    ]


def current_snapshot(ctx: ServiceContext, session: Session, inv: Inventory) -> Snapshot:
    from hetpool.server.services.nodes import engine_busy, health_view

    models = {m.name: m for m in inv.catalog.all()}
    offline, broken, engine_used = health_view(session)  # offline nodes and abnormal devices never take work
    allocations = active_allocations(session)
    return build_snapshot(
        list(inv.clusters.values()),
        list(inv.nodes.values()),
        list(inv.pools.values()),
        models,
        allocations,
        unhealthy_nodes=offline,
        unhealthy_devices=broken,
        external_busy=engine_busy(engine_used, allocations, inv.pools),
    )


def placement_options(inv: Inventory, spec: TaskSpec) -> dict:
    """What the scheduler applies to this task beyond its spec: its queue's pools and its
    device class's placement rule (so that plan and the scheduler agree)."""
    from hetpool.scheduling.queueing import route

    queue = route(spec, list(inv.queues.values()))
    demand = spec.per_worker.devices
    rule = inv.policy.rule(demand.device_class if demand else None)
    return {"allowed_pools": set(queue.pools) or None, "placement": rule.placement}


def plan_spec(ctx: ServiceContext, inv: Inventory, snap: Snapshot, spec: TaskSpec) -> dict:
    options = placement_options(inv, spec)
    result = assign(snap, spec, ctx.compat.check, **options)
    fits_when_idle = result.feasible or assign(snap.emptied(), spec, ctx.compat.check, **options).feasible
    body = {
        "feasible": result.feasible,
        "fits_when_idle": fits_when_idle,
        "placements": [p.to_dict() for p in result.placements],
        "fallback_used": result.fallback_used,
        "chosen": result.chosen,
        "reasons": dict(result.reasons) if not result.feasible else {},
        "explanation": explanation(result, fits_when_idle, nodes=len(snap.node_names)),
    }
    if result.feasible:
        model = inv.catalog.get(result.placements[0].model) if result.placements[0].model in inv.catalog else None
        seconds = runtime_on(spec, model)
        hourly = cost_per_hour(result.placements)
        body["estimated_runtime_s"] = seconds
        body["estimated_runtime"] = format_duration(seconds)
        body["cost_per_hour"] = hourly
        body["estimated_cost"] = round(hourly * seconds / 3600, 2) if seconds is not None else None
        body["estimated_wait_s"] = 0
        body["backend"] = backend_fit(inv, spec, result.placements)
    return body


def backend_fit(inv: Inventory, spec: TaskSpec, placements) -> dict:
    """Which backend would run the placement, what it declares, and what it cannot do here
    (with the reason), so that plan says so before dispatch fails."""
    from collections import Counter

    from hetpool.backends.base import capabilities
    from hetpool.backends.registry import backend_class, capability_gaps

    pool = inv.pools.get(placements[0].pool)
    cluster = inv.clusters.get(pool.cluster) if pool else None
    if cluster is None:
        return {}
    kind = cluster.backend.value
    needs = {"log-streaming": "logs -f"}
    per_node = Counter(p.node for p in placements)
    if len(per_node) > 1:
        needs["gang"] = f"{len(placements)} workers on {len(per_node)} nodes start together"
        if len(set(per_node.values())) > 1:
            needs["uneven-gang"] = ", ".join(f"{n}: {c}" for n, c in sorted(per_node.items()))
    if any(p.device_fraction < 1 for p in placements):
        needs["fractional-devices"] = "the task asks for a slice of a device"
    try:
        declared = capabilities(backend_class(kind))
        gaps = capability_gaps(kind, dict(cluster.backend_config), needs)
    except LookupError as exc:
        return {"cluster": cluster.name, "kind": kind, "unsupported": [{"capability": "backend", "reason": str(exc)}]}
    return {"cluster": cluster.name, "kind": kind, "capabilities": declared, "unsupported": gaps}


def plan(ctx: ServiceContext, session: Session, raw: dict) -> dict:
    from hetpool.server.services.hot_path import read_inventory
    from hetpool.server.services.sched_state import learned_runtimes, plan_estimate, with_runtime

    inv = read_inventory(ctx, session)
    spec = resolve_task_spec(inv, raw)
    snap = current_snapshot(ctx, session, inv)
    # Estimates use the template's learned runtime when the task gives none, as the
    # scheduler does; the returned task document stays what the user asked for.
    body = plan_spec(ctx, inv, snap, with_runtime(spec, learned_runtimes(session, inv)))
    if body["fits_when_idle"]:
        body.update(plan_estimate(ctx, session, inv, snap, spec))
    from hetpool.server.services import approvals

    body["approval"] = approvals.plan_summary(approvals.evaluate_task(ctx, session, inv, snap, spec))
    body["task"] = spec_to_document(spec)
    return body


def submit(ctx: ServiceContext, session: Session, raw: dict, actor: str) -> TaskRow:
    from hetpool.server.services.hot_path import cached_inventory, idle_snapshot

    inv, inventory_key = cached_inventory(ctx.hot_path, ctx, session)
    spec = resolve_task_spec(inv, raw)
    idle = assign(idle_snapshot(ctx.hot_path, session, inv, inventory_key), spec, ctx.compat.check, **placement_options(inv, spec))
    if not idle.feasible:
        info = explanation(idle, False)
        raise UnschedulableError(
            f"task {spec.name!r} cannot run on any pool, even when idle: {info['summary']}",
            details=[{"loc": reason, "msg": f"{count} node(s)"} for reason, count in idle.reasons.most_common()],
        )
    from hetpool.server.services import approvals
    from hetpool.server.services.cost import budget_hard_stop

    stop = budget_hard_stop(ctx, session, inv, spec.tenant)
    if stop:
        raise BudgetExceededError(f"task {spec.name!r} refused: {stop}", details=[{"loc": "tenant", "msg": stop}])
    approvals.check_task_labels(spec)
    # Only a reserved-pool rule needs the live snapshot (allocations included): build it then.
    verdict = approvals.evaluate_task(ctx, session, inv, lambda: current_snapshot(ctx, session, inv), spec)
    state = TaskState.PENDING_APPROVAL if verdict.needed else TaskState.QUEUED
    now = ctx.clock.now()
    row = TaskRow(
        id=new_task_id(),
        name=spec.name,
        tenant=spec.tenant,
        env=spec.env.value,
        task_type=spec.task_type.value,
        template=spec.template,
        priority=spec.priority.value,
        priority_rank=spec.priority.rank,
        state=state.value,
        spec=spec_to_document(spec),
        created_by=actor,
        created_at=now,
        updated_at=now,
        queued_at=now if state == TaskState.QUEUED else None,  # an approved task queues from its approval
        attempt=0,
        message="",
    )
    session.add(row)
    session.flush()
    audit.record(
        session, actor=actor, action="task.submit", object_kind="Task", object_id=row.id, after={"state": row.state, "spec": row.spec}, ts=now
    )
    if verdict.needed:
        approvals.open_task_request(ctx, session, row, spec, verdict, actor)
    return row


_TIMESTAMP_FOR = {
    TaskState.QUEUED: "queued_at",
    TaskState.ADMITTED: "admitted_at",
    TaskState.RUNNING: "started_at",
    TaskState.SUCCEEDED: "finished_at",
    TaskState.FAILED: "finished_at",
    TaskState.CANCELLED: "finished_at",
}


def transition(ctx: ServiceContext, session: Session, row: TaskRow, target: TaskState, *, actor: str, message: str = "", **fields: Any) -> None:
    """The only place a task's state changes; writes the audit event in the same transaction."""
    current = TaskState(row.state)
    check_transition(current, target)
    now = ctx.clock.now()
    before = {"state": current.value}
    row.state = target.value
    row.updated_at = now
    if message:
        row.message = message
    stamp = _TIMESTAMP_FOR.get(target)
    # queued_at keeps a requeued (preempted) task's age; started_at is set by the first
    # RUNNING of an attempt (preemption clears it for the next attempt).
    if stamp and (stamp not in ("started_at", "queued_at") or getattr(row, stamp) is None):
        setattr(row, stamp, now)
    for key, value in fields.items():
        setattr(row, key, value)
    after = {"state": target.value, **({"message": message} if message else {}), **{k: v for k, v in fields.items() if _jsonable(v)}}
    audit.record(session, actor=actor, action=f"task.{target.value}", object_kind="Task", object_id=row.id, before=before, after=after, ts=now)


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))


def get_row(session: Session, task_id: str, *, for_update: bool = False) -> TaskRow:
    stmt = select(TaskRow).where(TaskRow.id == task_id)
    if for_update and session.bind.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = session.execute(stmt).scalar_one_or_none()
    if row is None:
        raise NotFoundError(f"task {task_id!r} not found")
    return row


def cancel(ctx: ServiceContext, session: Session, task_id: str, actor: str) -> TaskRow:
    row = get_row(session, task_id, for_update=True)
    state = TaskState(row.state)
    if state.terminal:
        raise ConflictError(f"task {task_id} already ended ({state.value}); nothing to cancel")
    if state in (TaskState.DISPATCHED, TaskState.RUNNING, TaskState.UNKNOWN):
        # The backend job must be stopped first; the reconciler does that outside any
        # transaction and then records the cancellation.
        if not row.cancel_requested:
            row.cancel_requested = True
            audit.record(session, actor=actor, action="task.cancel_requested", object_kind="Task", object_id=row.id, ts=ctx.clock.now())
        return row
    transition(ctx, session, row, TaskState.CANCELLED, actor=actor, message=f"cancelled by {actor}")
    return row


def placements_of(session: Session, row: TaskRow) -> list[PlacementRow]:
    return list(
        session.execute(
            select(PlacementRow).where(PlacementRow.task_id == row.id, PlacementRow.attempt == row.attempt).order_by(PlacementRow.rank)
        ).scalars()
    )


def _iso(ts: datetime | None) -> str | None:
    ts = aware(ts)
    return ts.isoformat().replace("+00:00", "Z") if ts else None


def task_dict(session: Session, row: TaskRow, *, detail: bool = False) -> dict:
    body = {
        "id": row.id,
        "name": row.name,
        "tenant": row.tenant,
        "env": row.env,
        "type": row.task_type,
        "template": row.template,
        "priority": row.priority,
        "state": row.state,
        "attempt": row.attempt,
        "cluster": row.cluster,
        "backend": row.backend,
        "job_id": row.job_id,
        "exit_code": row.exit_code,
        "message": row.message,
        "fallback_used": row.fallback_used,
        "created_by": row.created_by,
        "created_at": _iso(row.created_at),
        "admitted_at": _iso(row.admitted_at),
        "started_at": _iso(row.started_at),
        "finished_at": _iso(row.finished_at),
        "placements": [
            {"rank": p.rank, "node": p.node, "pool": p.pool, "model": p.model, "devices": p.device_indices, "device_fraction": p.device_fraction}
            for p in placements_of(session, row)
        ]
        if row.attempt
        else [],
    }
    if row.state == TaskState.QUEUED.value and row.pending_explanation:
        body["pending"] = row.pending_explanation
    if row.state == TaskState.PENDING_APPROVAL.value:
        from hetpool.server.services.approvals import pending_for_task

        body["approval"] = pending_for_task(session, row.id)
    if detail:
        body["spec"] = row.spec
        body["placement_attempts"] = row.placement_attempts or []
        body["pending"] = row.pending_explanation
        events = session.execute(
            select(AuditEventRow).where(AuditEventRow.object_kind == "Task", AuditEventRow.object_id == row.id).order_by(AuditEventRow.id)
        ).scalars()
        body["events"] = [audit.event_dict(e) for e in events]
    return body


def _in_subtree(tenant: str):
    # autoescape: '_' is allowed in tenant names and is a LIKE wildcard.
    return (TaskRow.tenant == tenant) | TaskRow.tenant.startswith(tenant + "/", autoescape=True)


def list_tasks(
    session: Session, *, state: str | None = None, tenant: str | None = None, limit: int = 200, scopes: list[str] | None = None
) -> list[TaskRow]:
    """Newest first; `scopes` (from access.visible_tenants) keeps only tasks in those
    subtrees (None: no restriction, []: nothing)."""
    if scopes is not None and not scopes:
        return []
    stmt = select(TaskRow).order_by(TaskRow.created_at.desc(), TaskRow.id).limit(limit)
    if state:
        stmt = stmt.where(TaskRow.state == state)
    if tenant:
        stmt = stmt.where(_in_subtree(tenant.strip("/")))
    if scopes is not None:
        stmt = stmt.where(or_(*(_in_subtree(s) for s in scopes)))
    return list(session.execute(stmt).scalars())


def logs(ctx: ServiceContext, session: Session, task_id: str, *, rank: int, offset: int, limit: int) -> dict:
    row = get_row(session, task_id)
    if not row.job_id or not row.backend:
        return {"text": "", "offset": 0, "complete": TaskState(row.state).terminal, "state": row.state}
    from hetpool.backends.base import JobHandle

    if rank < 0 or (row.spec.get("workers", 1) <= rank):
        raise SpecError(f"rank: worker {rank} does not exist; the task has ranks 0..{row.spec.get('workers', 1) - 1}")
    cluster = load_inventory(ctx, session).clusters.get(row.cluster or "")
    chunk = ctx.backend_for(row.backend, cluster).logs(JobHandle(row.backend, row.job_id), rank=rank, offset=offset, limit=limit)
    return {"text": chunk.text, "offset": chunk.offset, "complete": chunk.complete and TaskState(row.state).terminal, "state": row.state}
