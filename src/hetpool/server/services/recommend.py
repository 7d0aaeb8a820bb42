"""Task entry by goal: the ranked ways to run a goal on this estate, and submit's sizing of
a task that states a goal and no devices.

For every pool of accelerators the goal is sized (catalog/sizing.py) for the pool's device
model and node size; each split that fits the pool becomes a concrete task document, and
the scheduler's own plan (tasks.plan: compatibility, quotas, the queue ahead, the start
estimate) says whether and when it would start. scheduling/recommend.py judges the
targets and ranks. Read-only: nothing here writes a row.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from hetpool.catalog.devices import REFERENCE_MODEL
from hetpool.catalog.models import builtin_models
from hetpool.catalog.sizing import Reference, Sizing, nearest_dense, size, workload
from hetpool.catalog.task_types import task_type_verdict
from hetpool.core.errors import SpecError
from hetpool.core.goal import Goal
from hetpool.core.inventory import DeviceClass, TaskType
from hetpool.core.limits import MAX_DURATION_S, format_limit_s
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import apply_template
from hetpool.scheduling.recommend import Option, excluded_pool, fallback_orders, judge, rank
from hetpool.server.services.cluster_state import read_inventory
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory

# Device classes a model's work runs on (CPU and DPU pools are not sized for it).
ACCELERATORS = {c for c in DeviceClass if c not in (DeviceClass.CPU, DeviceClass.DPU)}
MAX_OPTIONS_PLANNED = 24  # each option runs one plan; more pools than this: the fastest on an idle estate
HOST_CPU_PER_DEVICE = 8
HOST_MEMORY_GB_PER_DEVICE = 32


# tasks.plan, passed in: tasks.submit sizes goal-only tasks with this module, so it cannot import tasks.
Planner = Callable[[ServiceContext, Session, dict], dict]


def recommend(ctx: ServiceContext, session: Session, raw: dict[str, Any], plan_task: Planner) -> dict:
    """{"goal", "model", "deadline", "options": [...ranked], "excluded": [{pool, model, reason}]}."""
    inv = read_inventory(ctx, session)
    raw = pin_deadline(raw, ctx.clock.now()) if isinstance(raw, dict) else raw
    base = _with_template(inv, raw)
    goal = _goal_of(base)
    now = ctx.clock.now()
    load = _workload(goal)
    candidates, excluded = _sized_candidates(inv, goal, load, base, now)
    options = []
    for names, sizing, doc in candidates[:MAX_OPTIONS_PLANNED]:
        try:
            plan = plan_task(ctx, session, copy.deepcopy(doc))
        except SpecError as exc:
            excluded += [_excluded(inv, n, "plan", {"why": exc.message}) for n in names]
            continue
        if not plan["fits_when_idle"] or plan["explanation"].get("facts", {}).get("refused_at_submit"):
            excluded += [_excluded(inv, n, "plan", {"why": _why_not(plan)}) for n in names]
            continue
        options.append(_option(inv, _planned_pool(plan, names), sizing, doc, plan, now))
    for option in options:
        judge(option, goal, now)
    excluded = list({(e["pool"], e["reason"]): e for e in excluded}.values())
    ranked = rank(options)
    fallback_orders(ranked)
    deadline = goal.deadline_at(now)
    return {
        "goal": goal.model_dump(mode="json", exclude_none=True),
        "model": {"name": load.card.name if not load.shape_from else None, "params_b": round(load.params / 1e9, 3), "shape_from": load.shape_from},
        "deadline": deadline.isoformat() if deadline else None,
        "options": [o.to_dict() for o in ranked],
        "excluded": excluded,
    }


def sized_document(ctx: ServiceContext, session: Session, raw: dict[str, Any], plan_task: Planner) -> dict[str, Any]:
    """The task a goal-only submission becomes: the top-ranked option's document (with its
    fallback order). Raises with every pool's reason when no option exists."""
    answer = recommend(ctx, session, raw, plan_task)
    if not answer["options"]:
        why = "; ".join(f"{e['pool']}: {e['reason']}" for e in answer["excluded"]) or "no pool of accelerators"
        raise SpecError(f"goal: no pool can run it: {why}", details=[{"loc": "goal", "msg": why}])
    return answer["options"][0]["task"]


def pin_deadline(raw: dict[str, Any], now: datetime) -> dict[str, Any]:
    """A deadline given as a duration counts from submission: stored as a time, so that a
    restart or a requeue does not move it. A time already past, or further ahead than any
    duration may reach (366 days), is refused here: later reads of a stored spec never
    compare it with the clock."""
    goal = raw.get("goal") if isinstance(raw, dict) else None
    if not isinstance(goal, dict) or goal.get("deadline") in (None, ""):
        return raw
    try:
        when = Goal.model_validate({"deadline": goal["deadline"]}).deadline_at(now)
    except ValueError:
        return raw  # the spec's own validation names the field
    if when < now:
        _refuse_deadline(f"{when.isoformat()} is in the past (now {now.replace(microsecond=0).isoformat()})")
    if (when - now).total_seconds() > MAX_DURATION_S:
        _refuse_deadline(f"{when.isoformat()} is more than {format_limit_s(MAX_DURATION_S)} ahead")
    return {**raw, "goal": {**goal, "deadline": when.isoformat()}}


def _refuse_deadline(why: str) -> None:
    raise SpecError(f"goal.deadline: {why}", details=[{"loc": "goal.deadline", "msg": why}])


def sizes_itself(raw: dict[str, Any]) -> bool:
    """A task that states a sizable goal and names no devices of its own."""
    goal = raw.get("goal") if isinstance(raw, dict) else None
    if not isinstance(goal, dict) or not (goal.get("model") or goal.get("params")) or not goal.get("method"):
        return False
    own = raw.get("per_worker") or {}
    return not (isinstance(own, dict) and own.get("devices"))


def _with_template(inv: Inventory, raw: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SpecError("a task is a mapping with kind: Task")
    raw = {k: v for k, v in raw.items() if k != "kind"}
    name = raw.get("template")
    if name and name in inv.templates:
        template = inv.templates[name]
        merged = apply_template(raw, template)
        # The goal sizes the devices: the template's device counts and candidate lists give way.
        own = raw.get("per_worker") if isinstance(raw.get("per_worker"), dict) else {}
        defaults = merged.get("per_worker") or {}
        merged["per_worker"] = {k: v for k, v in defaults.items() if k != "devices"} | own
        for key in ("workers", "fallback", "any_of"):
            if key not in raw:
                merged.pop(key, None)
        merged.pop("template", None)
        merged["template"] = name if not (template.defaults.fallback or template.defaults.any_of or template.defaults.workers) else None
        return {k: v for k, v in merged.items() if v is not None}
    return raw


def _goal_of(raw: dict[str, Any]) -> Goal:
    # The whole document, so that every field's error reads as submit's does (the field named).
    goal = parse_spec({**raw, "kind": "Task"}).goal or Goal()
    if not goal.sizes:
        raise SpecError(
            "goal: name the model (goal.model, e.g. llama3.1-8b, or goal.params, e.g. 13B) and goal.method to get options",
            details=[{"loc": "goal.method", "msg": "required; one of pretrain, full-finetune, lora, qlora, inference, batch-inference"}],
        )
    return goal


def _workload(goal: Goal):
    table = builtin_models()
    if goal.model:
        card = table.require(goal.model)
        if card.max_seq_len and goal.seq_len > card.max_seq_len:
            raise SpecError(
                f"goal.seq_len: {goal.seq_len} is above {card.name}'s context of {card.max_seq_len} tokens",
                details=[{"loc": "goal.seq_len", "msg": f"at most {card.max_seq_len} for {card.name}"}],
            )
        return workload(goal, card)
    return workload(goal, None, nearest_dense(list(table.cards.values()), goal.params))


def _pool_shape(inv: Inventory, pool) -> tuple[int, int]:
    """(most devices of the pool's model on one of its nodes, devices in all)."""
    counts = [g.count for n in pool.nodes if n in inv.nodes for g in inv.nodes[n].devices if g.model == pool.model]
    return (max(counts) if counts else 0), sum(counts)


def _pool_groups(inv: Inventory) -> list[list]:
    """Pools that are the same option: one device model, the same node size, device count,
    price and software stacks. A group is sized and planned once, its pools in the task's
    fallback (an estate of many identical pools costs one plan, not one per pool)."""
    groups: dict[tuple, list] = {}
    for pool in sorted(inv.pools.values(), key=lambda p: p.name):
        nodes = [inv.nodes[n] for n in pool.nodes if n in inv.nodes]
        stacks = sorted(n.stack.model_dump_json() if n.stack else "" for n in nodes)
        key = (pool.model, _pool_shape(inv, pool), pool.price_per_hour, pool.shareable, tuple(stacks))
        groups.setdefault(key, []).append(pool)
    return list(groups.values())


def _sized_candidates(inv: Inventory, goal: Goal, load, base: dict, now: datetime):
    """(pool names, sizing, task document) for every split that fits a group of identical
    pools, fastest first on an idle estate, and the pools left out with the reason."""
    ref = Reference.of(inv.catalog.get(REFERENCE_MODEL))
    deadline = goal.deadline_at(now)
    deadline_s = (deadline - now).total_seconds() if deadline else None
    task_type = TaskType(base.get("type") or goal.method.task_type)
    candidates, excluded = [], []
    for group in _pool_groups(inv):
        pool, names = group[0], [p.name for p in group]
        model = inv.catalog.get(pool.model) if pool.model in inv.catalog else None
        if model is None or model.device_class not in ACCELERATORS:
            continue
        verdict = task_type_verdict(model, task_type)
        if not verdict.ok:
            excluded += [_excluded(inv, n, "task_type", {"task_type": task_type.value, "why": verdict.why}) for n in names]
            continue
        per_node, capacity = _pool_shape(inv, pool)
        if capacity == 0:
            continue
        for sizing in size(load, model, per_node, ref, deadline_s, max_devices=capacity):
            if not sizing.fits:
                excluded += [_excluded(inv, n, sizing.why_note["code"], sizing.why_note["params"]) for n in names]
            elif sizing.devices > capacity:
                params = {"variant": sizing.variant, "devices": str(sizing.devices), "model": model.name, "capacity": str(capacity)}
                excluded += [_excluded(inv, n, "too_big", params) for n in names]
            else:
                candidates.append((names, sizing, _document(inv, pool, names, model, sizing, base, goal)))
    candidates.sort(key=lambda c: (c[1].runtime_s if c[1].runtime_s is not None else math.inf, c[1].devices))
    return candidates, excluded


def _document(inv: Inventory, pool, names: list[str], model, sizing: Sizing, base: dict, goal: Goal) -> dict:
    """The ordinary task this option is: the user's fields, the sized devices, this pool."""
    doc = {k: v for k, v in base.items() if k not in ("per_worker", "workers", "fallback", "any_of", "runtime_estimate")}
    doc["type"] = base.get("type") or goal.method.task_type
    own = base.get("per_worker") or {}
    nodes = [inv.nodes[n] for n in pool.nodes if n in inv.nodes]
    node_cpu = min(n.cpu_cores for n in nodes)
    node_memory = min(n.memory_gb for n in nodes)
    per = sizing.devices_per_worker
    memory = own.get("memory_gb") or HOST_MEMORY_GB_PER_DEVICE * per
    memory += math.ceil(sizing.host_memory_gib or 0)
    doc["workers"] = sizing.workers
    doc["per_worker"] = {
        "devices": {"class": model.device_class.value, "count": per},
        "cpu": own.get("cpu") or min(HOST_CPU_PER_DEVICE * per, node_cpu),
        "memory_gb": min(memory, node_memory),
    }
    feature = goal.precision.feature
    if feature:
        doc["features"] = sorted({*(base.get("features") or []), feature})
    if sizing.reference_runtime_s is not None:
        doc["runtime_estimate"] = f"{math.ceil(sizing.reference_runtime_s)}s"
    if sizing.needs_island:
        doc["topology"] = {**(base.get("topology") or {}), "device_island": True}
    doc["fallback"] = list(names)
    return doc


def _option(inv: Inventory, pool: str, sizing: Sizing, doc: dict, plan: dict, now: datetime) -> Option:
    start = plan.get("estimated_start")
    hourly = plan.get("cost_per_hour")
    if hourly is None:
        hourly = inv.pools[pool].price_per_hour * sizing.devices
    return Option(
        model=sizing.device_model,
        pool=pool,
        device_class=doc["per_worker"]["devices"]["class"],
        count=sizing.devices,
        workers=sizing.workers,
        devices_per_worker=sizing.devices_per_worker,
        sizing=sizing.to_dict(),
        runtime_s=sizing.runtime_s,
        cost_per_hour=hourly,
        estimated_start=datetime.fromisoformat(start) if start else None,
        startable_now=bool(plan.get("feasible")),
        task=doc,
    )


def _planned_pool(plan: dict, names: list[str]) -> str:
    """Where the plan puts it (now, or where it expects it to start), else the group's first."""
    if plan.get("placements"):
        return plan["placements"][0]["pool"]
    return plan.get("estimated_pool") if plan.get("estimated_pool") in names else names[0]


def _why_not(plan: dict) -> str:
    """The plan's own reasons for the pool's nodes (its summary counts the whole estate)."""
    reasons = plan.get("reasons") or {}
    if reasons:
        return "; ".join(sorted(reasons, key=lambda r: -reasons[r]))
    return plan["explanation"].get("summary") or "does not fit"


def _excluded(inv: Inventory, pool: str, code: str, params: dict[str, str]) -> dict:
    spec = inv.pools.get(pool)
    return excluded_pool(pool, spec.model if spec else None, code, params)
