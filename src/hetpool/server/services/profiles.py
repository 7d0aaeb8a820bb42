"""A pool's capability profile: what its devices and stack are, how many are idle, busy,
abnormal or offline, which task types and frameworks it can run (and for the others,
why not), and which device types it can stand in for, at what relative performance.
This is what `hetpool describe pool P` and the dashboard show."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.catalog.task_types import task_type_verdict
from hetpool.core.errors import NotFoundError
from hetpool.core.inventory import DeviceModelSpec, TaskType
from hetpool.core.tasks import FrameworkRequest
from hetpool.server.db.models import NodeStatusRow
from hetpool.server.services.cluster_state import live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import load_inventory


def pool_profile(ctx: ServiceContext, session: Session, name: str) -> dict:
    inv = load_inventory(ctx, session)
    spec = inv.pools.get(name)
    if spec is None:
        raise NotFoundError(f"Pool {name!r} not found")
    snap = live_snapshot(ctx, session)
    view = snap.pools[snap.pool_by_name[name]] if name in snap.pool_by_name else None
    model = inv.catalog.get(spec.model)
    stack = view.stack if view is not None else spec.stack
    states = {r.node: r for r in session.execute(select(NodeStatusRow).where(NodeStatusRow.node.in_(spec.nodes))).scalars()}
    counts = {"idle": 0, "busy": 0, "abnormal": 0, "offline": 0}
    nodes = []
    for row in view.rows if view is not None else []:
        node_index = int(snap.row_node[row])
        node_name = snap.node_names[node_index]
        status = states.get(node_name)
        node_state = status.state if status is not None else "ready"
        free = snap.dev_free[row]
        per = {"idle": 0, "busy": 0, "abnormal": 0, "offline": 0}
        for value in free:
            if value < -0.5:
                per["abnormal"] += 1
            elif not snap.node_healthy[node_index]:
                per["offline"] += 1
            elif value >= 1.0 - 1e-9:
                per["idle"] += 1
            else:
                per["busy"] += 1
        for key, value in per.items():
            counts[key] += value
        nodes.append({"node": node_name, "state": node_state, "reason": status.reason if status else "", "devices": per})
    report = view.feature_report if view is not None else None
    return {
        "pool": spec.name,
        "cluster": spec.cluster,
        "labels": spec.labels,
        "profile": {
            "model": model.name,
            "display_name": model.display_name,
            "vendor": model.vendor.value,
            "class": model.device_class.value,
            "memory_gb": model.memory_gb,
            "interconnect": model.interconnect,
            "verified": model.verified,
            "stack": stack.model_dump(mode="json", exclude_defaults=True) if stack else None,
            "features": sorted(report.features) if report else sorted(model.features),
            "features_missing": dict(sorted(report.missing.items())) if report else {},
            "feature_notes": {k: v for k, v in sorted(report.notes.items()) if v} if report else {},
        },
        "devices": {"total": sum(counts.values()), **counts},
        "nodes": nodes,
        "task_types": _task_types(model),
        "frameworks": _frameworks(ctx, model, stack),
        "substitutes_for": _substitutes(inv, model),
        "reserved_for": spec.reserved_for.model_dump(mode="json") if spec.reserved_for else None,
        "price_per_hour": spec.price_per_hour,
        "shareable": spec.shareable,
    }


def _task_types(model: DeviceModelSpec) -> list[dict]:
    """Per task type: does the pool take it (the catalog's rule, as the scheduler applies it)?"""
    out = []
    for task_type in TaskType:
        verdict = task_type_verdict(model, task_type)
        entry: dict = {"type": task_type.value, "ok": verdict.ok}
        if verdict.relative_performance is not None:
            entry["relative_performance"] = verdict.relative_performance
        if not verdict.ok:
            entry["why"] = verdict.why
        out.append(entry)
    return out


def _frameworks(ctx: ServiceContext, model: DeviceModelSpec, stack) -> list[dict]:
    """Per framework in the KB: runs with what is installed? with a task's own image?"""
    out = []
    for framework in ctx.compat.frameworks():
        request = FrameworkRequest(name=framework)
        installed = ctx.compat.check(model, stack, request, has_image=False)
        with_image = installed if installed.ok else ctx.compat.check(model, stack, request, has_image=True)
        entry = {"framework": framework, "installed_ok": installed.ok, "with_image_ok": with_image.ok, "with_image_status": with_image.status}
        if not with_image.ok:
            entry["why"] = with_image.detail or with_image.reason
        elif not installed.ok:
            entry["why_not_installed"] = installed.detail or installed.reason
        out.append(entry)
    return out


def _substitutes(inv, model: DeviceModelSpec) -> list[dict]:
    """Device types of the same class in this inventory that this model can stand in for,
    with its throughput relative to theirs per task type (1.2 = 20 % faster)."""
    in_use = {p.model for p in inv.pools.values()} - {model.name}
    out = []
    for other_name in sorted(in_use):
        other = inv.catalog.get(other_name) if other_name in inv.catalog else None
        if other is None or other.device_class != model.device_class:
            continue
        ratios = {}
        for task_type in (TaskType.TRAINING, TaskType.INFERENCE, TaskType.BATCH_INFERENCE):
            theirs = other.perf_for(task_type)
            if theirs > 0:
                ratios[task_type.value] = round(model.perf_for(task_type) / theirs, 3)
        out.append(
            {"model": other.name, "memory_gb_ratio": round(model.memory_gb / other.memory_gb, 3) if other.memory_gb else None, "relative": ratios}
        )
    return sorted(out, key=lambda e: -e["relative"].get("training", 0))
