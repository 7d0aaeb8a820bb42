"""Read-only views for the dashboard's governance pages.

  approval_inbox(ctx, session, principal, state=, tenant=, limit=) -> {now, requests}
      The approval requests the caller may see (exactly those of GET /api/v1/approvals,
      through services.approvals.list_requests), each with what an approver needs to
      decide without opening anything else: its age, whether the caller may decide it
      (services.approvals.may_decide: role and separation of duties), what the task asks for, and
      what it would cost per hour and for its expected runtime at the placement the
      scheduler would pick (prices as the cost worker will charge them).

A named approver may decide a request on a tenant whose tasks it cannot read; the
summary gives it the task's shape (workers, devices, CPU, memory, runtime), never its
command, image or environment variables.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.errors import HetpoolError
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import TaskSpec
from hetpool.core.units import parse_duration
from hetpool.governance.cost import PriceBook
from hetpool.scheduling.assign import assign
from hetpool.scheduling.estimate import runtime_on
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.db.models import TaskRow
from hetpool.server.services import approvals as approval_service
from hetpool.server.services import duties
from hetpool.server.services.auth import Principal
from hetpool.server.services.cluster_state import live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, load_inventory
from hetpool.server.services.sched_state import learned_runtimes, with_runtime
from hetpool.server.services.task_planning import placement_options


def approval_inbox(
    ctx: ServiceContext, session: Session, principal: Principal, *, state: str | None = None, tenant: str | None = None, limit: int = 200
) -> dict:
    now = ctx.clock.now()
    rows = approval_service.list_requests(session, principal, state=state, tenant=tenant, limit=limit)
    estimator = _Estimator(ctx, session)
    known = duties.load_vouches(session) if any(r.state == approval_service.PENDING for r in rows) else None
    requests = []
    for row in rows:
        item = approval_service.approval_dict(row)
        expired = row.expires_at <= now
        item["age_s"] = max(0, int((now - row.created_at).total_seconds()))
        item["expires_in_s"] = int((row.expires_at - now).total_seconds())
        item["may_decide"] = row.state == approval_service.PENDING and not expired and approval_service.may_decide(session, principal, row, known)
        item["requested"] = None
        item["estimate"] = None
        task = session.get(TaskRow, row.task_id) if row.task_id else None
        if task is not None:
            spec = _spec_of(task)
            item["requested"] = _task_summary(task, spec)
            if row.state == approval_service.PENDING and spec is not None:
                # Only open requests get an estimate: it is what the approver weighs, and
                # it costs a placement search per request.
                item["estimate"] = estimator.estimate(spec)
        elif row.operation == "delete" and row.document:  # what goes: not limits asked for
            item["requested"] = {"kind": "delete", "object_kind": row.document.get("kind"), "name": row.document.get("name")}
        elif row.kind == "quota" and row.document:
            item["requested"] = _quota_summary(row.document)
        requests.append(item)
    return {"now": iso_utc(now), "requests": requests}


def _spec_of(task: TaskRow) -> TaskSpec | None:
    try:
        spec = parse_spec(task.spec)
    except HetpoolError:  # a spec stored by an older version: show the row without a summary
        return None
    return spec if isinstance(spec, TaskSpec) else None


def _task_summary(task: TaskRow, spec: TaskSpec | None) -> dict:
    body = {"kind": "task", "name": task.name, "state": task.state, "type": task.task_type, "env": task.env, "priority": task.priority}
    if spec is None:
        return body
    devices = spec.per_worker.devices
    body.update(
        {
            "workers": spec.workers,
            "device_class": devices.device_class.value if devices else None,
            "devices_per_worker": devices.count if devices else 0,
            "models": list(devices.models) if devices else [],
            "total_devices": round(spec.workers * devices.count, 6) if devices else 0,
            "cpu_per_worker": spec.per_worker.cpu,
            "memory_gb_per_worker": spec.per_worker.memory_gb,
            "runtime_estimate": spec.runtime_estimate,
            "max_runtime": spec.max_runtime,
        }
    )
    return body


def _quota_summary(document: dict) -> dict:
    keys = ("resource", "nominal", "borrowing_limit", "lending_limit")
    limits = [{k: limit.get(k) for k in keys} for limit in document.get("limits") or [] if isinstance(limit, dict)]
    return {"kind": "quota", "name": document.get("name"), "env": document.get("env"), "type": document.get("type"), "limits": limits}


class _Estimator:
    """Placement and prices, loaded once per call and only when a request needs them."""

    def __init__(self, ctx: ServiceContext, session: Session) -> None:
        self.ctx, self.session = ctx, session
        self._loaded: tuple[Inventory, Snapshot, PriceBook, dict[str, float]] | None = None

    def _load(self) -> tuple[Inventory, Snapshot, PriceBook, dict[str, float]]:
        if self._loaded is None:
            inv = load_inventory(self.ctx, self.session)
            snap = live_snapshot(self.ctx, self.session)
            self._loaded = (inv, snap, PriceBook(inv.by_kind("PriceList").values()), learned_runtimes(self.session, inv))
        return self._loaded

    def estimate(self, spec: TaskSpec) -> dict | None:
        """Where it would run (now, else on an idle estate) and what that costs; None when
        it fits nowhere."""
        inv, snap, prices, learned = self._load()
        spec = with_runtime(spec, learned)
        options = placement_options(inv, spec)
        result = assign(snap, spec, self.ctx.compat.check, **options)
        if not result.feasible:
            result = assign(snap.emptied(), spec, self.ctx.compat.check, **options)
        if not result.feasible or not result.placements:
            return None
        hourly, currency = 0.0, None
        for p in result.placements:
            pool = inv.pools.get(p.pool)
            rates = prices.rates(pool=pool, cluster=pool.cluster if pool else None, model=p.model)
            currency = currency or rates.currency
            hourly += len(p.device_indices) * p.device_fraction * rates.per_device_hour + p.cpu * rates.per_cpu_core_hour
            hourly += p.memory_gb * rates.per_memory_gib_hour
        first = result.placements[0]
        seconds, basis = runtime_on(spec, inv.catalog.get(first.model) if first.model in inv.catalog else None), "runtime_estimate"
        if seconds is None and spec.max_runtime:
            seconds, basis = parse_duration(spec.max_runtime), "max_runtime"  # an upper bound: the lease
        return {
            "pool": first.pool,
            "model": first.model,
            "cost_per_hour": round(hourly, 4),
            "currency": currency,
            "runtime_s": seconds,
            "basis": basis if seconds is not None else None,
            "estimated_cost": round(hourly * seconds / 3600, 2) if seconds is not None else None,
        }
