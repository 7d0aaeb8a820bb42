"""What-if capacity planning on the server: the control plane's own recent history replayed
on today's inventory and on a changed one (devices added or removed), with hetpool.sim —
the same `plan_capacity` as `hetpool plan-capacity --history`, without the HTTP round trip.

Bounded so that one request cannot keep a server busy for long: at most MAX_TASKS of the
most recent finished tasks are replayed, a few change rows of bounded size, both runs
together stop after MAX_SECONDS (an overloaded history makes every scheduling cycle see a
long queue, so time grows faster than the task count), and at most MAX_CONCURRENT
what-ifs run at a time (the rest are answered 409 at once)."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import timedelta

from hetpool.core.errors import ConflictError, SpecError
from hetpool.core.inventory import DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.server.services import access
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.history import export_history
from hetpool.server.services.inventory import load_inventory
from hetpool.sim.capacity import device_counts, plan_capacity, resolve_model
from hetpool.sim.engine import SimConfig
from hetpool.sim.trace import TraceTask

MAX_TASKS = 5000
MAX_SECONDS = 30.0
MAX_CONCURRENT = 2
_running = threading.BoundedSemaphore(MAX_CONCURRENT)


@dataclass(frozen=True)
class Change:
    count: int
    model: str


@dataclass(frozen=True)
class WhatIfRequest:
    days: float = 30.0
    add: tuple[Change, ...] = ()
    remove: tuple[Change, ...] = ()
    quotas: dict[str, float] | None = None
    wait_target_hours: float = 1.0
    idle_below: float = 0.3


class _OutOfTime(Exception):
    pass


def _deadline(seconds: float):
    """A progress callback for plan_capacity that stops the simulation after `seconds`."""
    end = time.perf_counter() + seconds

    def check(_run: str, _now: float, _arrived: int, _total: int) -> None:
        if time.perf_counter() > end:
            raise _OutOfTime

    return check


def _bad(loc: str, msg: str) -> SpecError:
    return SpecError(f"{loc}: {msg}", details=[{"loc": loc, "msg": msg}])


def _resolve_adds(rows: tuple[Change, ...], models: dict[str, DeviceModelSpec]) -> list[tuple[int, str]]:
    out = []
    for i, row in enumerate(rows):
        try:
            out.append((row.count, resolve_model(row.model, models)))
        except SpecError:
            raise _bad(f"add[{i}].model", f"unknown device model {row.model!r}; allowed model ids: {', '.join(sorted(models))}") from None
    return out


def _resolve_removes(
    rows: tuple[Change, ...], models: dict[str, DeviceModelSpec], nodes: list[NodeSpec], pools: list[PoolSpec]
) -> list[tuple[int, str]]:
    """Only models the pools hold can be removed, and no more devices than they hold (the
    rows for one model add up)."""
    held = device_counts(nodes, pools)
    out, asked = [], defaultdict(int)
    for i, row in enumerate(rows):
        try:
            model = resolve_model(row.model, models)
        except SpecError:
            model = None
        if model not in held:
            raise _bad(f"remove[{i}].model", f"no pool holds device model {row.model!r}; allowed model ids: {', '.join(held) or 'none'}")
        asked[model] += row.count
        if asked[model] > held[model]:
            raise _bad(f"remove[{i}].count", f"{asked[model]} {model} device(s) to remove in all, but the pools hold only {held[model]}")
        out.append((row.count, model))
    return out


def _recent(tasks: list[TraceTask]) -> list[TraceTask]:
    """The most recent MAX_TASKS, their arrivals counted from the first one kept."""
    if len(tasks) <= MAX_TASKS:
        return tasks
    kept = tasks[-MAX_TASKS:]
    start = kept[0].arrival_s
    return [replace(t, arrival_s=t.arrival_s - start) for t in kept]


def _pool_row(summary: dict, result, pool: str) -> dict:
    group = summary["per_pool"].get(pool) or {}
    wait, jct = group.get("wait_hours") or {}, group.get("jct_hours") or {}
    return {
        "devices": result.pool_devices.get(pool, 0),
        "tasks": group.get("tasks", 0),
        "wait_p50_hours": wait.get("p50"),
        "wait_p90_hours": wait.get("p90"),
        "jct_p50_hours": jct.get("p50"),
        "jct_avg_hours": jct.get("avg"),
        "utilisation": summary["utilisation"].get(pool),
        "cost": group.get("cost", 0.0),
    }


def _totals(summary: dict) -> dict:
    wait, jct = summary["wait_hours"], summary["jct_hours"]
    return {
        "tasks": summary["tasks"],
        "completed": summary["completed"],
        "never_started": summary["never_started"],
        "wait_avg_hours": wait["avg"],
        "wait_p50_hours": wait["p50"],
        "wait_p90_hours": wait["p90"],
        "jct_avg_hours": summary["avg_jct_hours"],
        "jct_p50_hours": jct["p50"],
        "jct_p90_hours": jct["p90"],
        "makespan_hours": summary["makespan_hours"],
        "preemptions": summary["preemptions"],
        "cost": summary["cost"],
    }


def what_if(ctx: ServiceContext, user: Principal, request: WhatIfRequest) -> dict:
    """Baseline vs changed inventory on the caller's visible history of the last `days`."""
    access.require(user, "inventory.read")
    since = ctx.clock.now() - timedelta(days=request.days)
    with ctx.db.transaction() as session:
        inv = load_inventory(ctx, session)
        history = export_history(session, inv.catalog, since=since)
    if access.visible_tenants(user) is not None:  # a scoped user replays its own subtrees only, as GET /api/v1/sim/history
        history = [t for t in history if access.can_see(user, t.spec.tenant)]
    models = {m.name: m for m in inv.catalog.all()}
    nodes, pools = list(inv.nodes.values()), list(inv.pools.values())
    adds = _resolve_adds(request.add, models)
    removes = _resolve_removes(request.remove, models, nodes, pools)
    if not pools:
        raise _bad("inventory", "no pools to simulate; apply an inventory first")
    if not history:
        raise _bad("days", f"no finished tasks in the last {request.days:g} day(s) to replay; choose a longer period")
    tasks = _recent(history)
    config = SimConfig(
        policy=inv.policies.get("default"), queues=list(inv.queues.values()), tenant_weights=inv.tenant_weights, quotas=list(inv.quotas.values())
    )
    if not _running.acquire(blocking=False):
        raise ConflictError(f"{MAX_CONCURRENT} what-if simulations are already running; try again in a few seconds")
    started = time.perf_counter()
    try:
        report = plan_capacity(
            list(inv.clusters.values()), nodes, pools, models, ctx.compat.check, tasks, adds, removes,
            wait_target_h=request.wait_target_hours, idle_below=request.idle_below, quotas=request.quotas, config=config,
            progress=_deadline(MAX_SECONDS),
        )  # fmt: skip
    except _OutOfTime:
        raise _bad("days", f"replaying {len(tasks)} task(s) took over {MAX_SECONDS:g} s; choose a shorter period") from None
    finally:
        _running.release()
    base_result, changed_result = report.baseline_result, report.changed_result
    pool_models = {**base_result.pool_models, **changed_result.pool_models}
    pool_rows = [
        {
            "name": pool,
            "model": pool_models.get(pool),
            "baseline": _pool_row(report["baseline"], base_result, pool) if pool in base_result.pool_devices else None,
            "changed": _pool_row(report["changed"], changed_result, pool) if pool in changed_result.pool_devices else None,
        }
        for pool in sorted(set(base_result.pool_devices) | set(changed_result.pool_devices))
    ]
    # The sim's recommendation texts are English; the facts behind them let a client word them itself.
    for rec in report["recommendations"]:
        if rec["kind"] in ("saturated-pool", "idle-pool"):
            rec.update(model=pool_models.get(rec["name"]), devices=base_result.pool_devices.get(rec["name"], 0))
        if rec["kind"] == "saturated-pool":
            rec["target_hours"] = request.wait_target_hours
        if rec["kind"] == "team-over-quota":
            rec["quota"] = (request.quotas or {}).get(rec["name"])
    return {
        "history": {
            "days": request.days,
            "since": since.isoformat(),
            "finished_tasks": len(history),
            "replayed_tasks": len(tasks),
            "truncated": len(tasks) < len(history),
            "max_tasks": MAX_TASKS,
        },
        "changes": report["changes"],
        "totals": {"baseline": _totals(report["baseline"]), "changed": _totals(report["changed"])},
        "pools": pool_rows,
        "cost_per_team": report["delta"]["cost_per_team"],
        "delta": report["delta"],
        "recommendations": report["recommendations"],
        "baseline": report["baseline"],
        "changed": report["changed"],
        "settings": {"wait_target_hours": request.wait_target_hours, "idle_below": request.idle_below, "quotas": request.quotas or {}},
        "elapsed_s": round(time.perf_counter() - started, 3),
    }
