"""Where a task could run: its spec resolved against the inventory, the placement the
scheduler would choose on a given snapshot (now and on an idle estate), and whether the
engine behind that placement can do what the task needs (the snapshots themselves come
from cluster_state).

Read-only: nothing here writes a row. `tasks.plan` and `tasks.submit` put these pieces
together with approvals and budgets; approvals, quotas and the views reuse them.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.names import candidate_problems, package_key, unknown_name
from hetpool.core.checkpoint import StopSignal
from hetpool.core.errors import SpecError
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import TaskSpec, apply_template
from hetpool.core.tenancy import tenant_ancestors
from hetpool.core.units import format_duration
from hetpool.engines.base import capabilities
from hetpool.engines.registry import backend_class, capability_gaps, unsupported_features
from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.estimate import cost_per_hour, runtime_on
from hetpool.scheduling.explain import explanation
from hetpool.scheduling.queueing import route
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory


def resolve_task_spec(inv: Inventory, raw: dict[str, Any], compat: CompatibilityKB | None = None) -> TaskSpec:
    """Raw task fields → TaskSpec, with the template's defaults and references checked:
    device models and pools it names must exist, and (given the compatibility KB) its
    framework must be one the KB knows. An unknown name lists the close matches."""
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
    problems = candidate_problems(spec, (m.name for m in inv.catalog.all()), inv.pools)
    if compat is not None and spec.framework is not None:
        problems += framework_problems(compat, spec.framework.name)
    if problems:
        text = "; ".join(f"{p['loc']}: {p['msg']}" for p in problems)
        raise SpecError(f"task {spec.name!r}: {text}", details=problems)
    return spec


def framework_problems(compat: CompatibilityKB, name: str, loc: str = "framework.name") -> list[dict]:
    """A framework name the KB does not know (not even as a package name or alias)."""
    known = compat.framework_names()
    if package_key(name) in {package_key(k) for k in known}:
        return []
    return [unknown_name(loc, "framework", name, known)]


def placement_options(inv: Inventory, spec: TaskSpec) -> dict:
    """What the scheduler applies to this task beyond its spec: its queue's pools and its
    device class's placement rule (so that plan and the scheduler agree)."""
    queue = route(spec, list(inv.queues.values()))
    demand = spec.per_worker.devices
    rule = inv.policy.rule(demand.device_class if demand else None)
    return {"allowed_pools": set(queue.pools) or None, "placement": rule.placement}


def plan_spec(ctx: ServiceContext, inv: Inventory, snap: Snapshot, spec: TaskSpec) -> dict:
    """Where the task would go on `snap` on its own (no queue ahead of it): the placement,
    or why it fits nowhere now, and whether it would fit the idle estate."""
    options = placement_options(inv, spec)
    result = assign(snap, spec, ctx.compat.check, **options)
    fits_when_idle = result.feasible or assign(snap.emptied(), spec, ctx.compat.check, **options).feasible
    if result.feasible:
        return {"fits_when_idle": True, **plan_placement(ctx, inv, spec, result)}
    return {
        "feasible": False,
        "fits_when_idle": fits_when_idle,
        "placements": [],
        "fallback_used": result.fallback_used,
        "chosen": result.chosen,
        "reasons": dict(result.reasons),
        "explanation": explanation(result, fits_when_idle, nodes=len(snap.node_names)),
    }


def plan_placement(ctx: ServiceContext, inv: Inventory, spec: TaskSpec, result: Assignment) -> dict:
    """A placement as a plan shows it: where, how long, what it costs, which engine runs it."""
    model = inv.catalog.get(result.placements[0].model) if result.placements[0].model in inv.catalog else None
    seconds = runtime_on(spec, model)
    hourly = cost_per_hour(result.placements)
    return {
        "feasible": True,
        "placements": [p.to_dict() for p in result.placements],
        "fallback_used": result.fallback_used,
        "chosen": result.chosen,
        "reasons": {},
        "explanation": explanation(result, True),
        "estimated_runtime_s": seconds,
        "estimated_runtime": format_duration(seconds),
        "cost_per_hour": hourly,
        "estimated_cost": round(hourly * seconds / 3600, 2) if seconds is not None else None,
        "estimated_wait_s": 0,
        "backend": backend_fit(inv, spec, result.placements),
    }


def backend_fit(inv: Inventory, spec: TaskSpec, placements) -> dict:
    """Which backend would run the placement, what it declares, and what it cannot do here
    (with the reason), so that plan says so before dispatch fails."""
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
    if spec.checkpoint is not None and spec.checkpoint.signal != StopSignal.SIGTERM:
        needs["checkpoint-signal"] = f"the task asks for {spec.checkpoint.signal.value} before it is stopped"
    if any(p.device_fraction < 1 for p in placements):
        needs["fractional-devices"] = "the task asks for a slice of a device"
    try:
        declared = capabilities(backend_class(kind))
        gaps = capability_gaps(kind, dict(cluster.backend_config), needs)
        # The engine's whole unsupported-feature table, so plan shows what it refuses and why.
        limits = [{"feature": f, "reason": u.reason} for f, u in unsupported_features(kind, dict(cluster.backend_config)).items()]
    except LookupError as exc:
        return {"cluster": cluster.name, "kind": kind, "unsupported": [{"capability": "backend", "reason": str(exc)}]}
    return {"cluster": cluster.name, "kind": kind, "capabilities": declared, "unsupported": gaps, "limits": limits}
