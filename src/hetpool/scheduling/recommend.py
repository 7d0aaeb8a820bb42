"""Ranking the ways to run a goal: which targets each option meets, why, and in what order
to offer them.

An option is one device model × count × pool, with the start the scheduler's own plan
estimates and the runtime sizing estimates (catalog/sizing.py). The order: options that
meet every target first, then fewer missed targets; among equals the earliest estimated
completion (for a service, the earliest start), then the lower cost, then fewer devices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from hetpool.core.goal import Goal
from hetpool.core.units import format_duration


@dataclass
class Option:
    model: str
    pool: str
    device_class: str
    count: int
    workers: int
    devices_per_worker: int
    sizing: dict
    runtime_s: float | None
    cost_per_hour: float
    estimated_start: datetime | None
    startable_now: bool
    task: dict
    meets: dict[str, bool] = field(default_factory=dict)
    reasons: list[str] = field(default_factory=list)
    notes: list[dict] = field(default_factory=list)  # the reasons as {"code", "params"} (NOTES)

    @property
    def estimated_completion(self) -> datetime | None:
        if self.estimated_start is None or self.runtime_s is None:
            return None
        return self.estimated_start + timedelta(seconds=self.runtime_s)

    @property
    def cost(self) -> float | None:
        if self.runtime_s is None:
            return None
        return round(self.cost_per_hour * self.runtime_s / 3600, 2)

    def to_dict(self) -> dict:
        completion = self.estimated_completion
        return {
            "model": self.model,
            "count": self.count,
            "pool": self.pool,
            "workers": self.workers,
            "devices_per_worker": self.devices_per_worker,
            "estimated_start": self.estimated_start.replace(microsecond=0).isoformat() if self.estimated_start else None,
            "estimated_completion": completion.replace(microsecond=0).isoformat() if completion else None,
            "estimated_runtime_s": round(self.runtime_s, 1) if self.runtime_s is not None else None,
            "estimated_runtime": format_duration(self.runtime_s) if self.runtime_s is not None else None,
            "cost": self.cost,
            "cost_per_hour": round(self.cost_per_hour, 4),
            "startable_now": self.startable_now,
            "meets": dict(self.meets),
            "reasons": list(self.reasons),
            "notes": list(self.notes),
            "sizing": self.sizing,
            "task": self.task,
        }


# What an option's reasons say, by code: English templates filled from `params` (strings,
# already formatted). The API sends both the sentences and the codes; the dashboard says
# the codes in its reader's language (web/goal_notes.py holds the same templates for
# translation, and tests/web/test_goal_form_pages.py checks the two lists agree).
NOTES = {
    "split": "{count} × {model} on {where}, {per_device} GiB of {usable} GiB usable per device",
    "offload": "optimizer states in host memory (ZeRO-Offload): {host_gib} GiB per worker, assumed {speed} speed",
    "no_tokens": "no goal.tokens: the runtime is not estimated",
    "no_start": "no start estimate: the pool is busy with work of unknown length",
    "starts_now": "can start now",
    "starts_in": "estimated start in {wait}",
    "deadline_unknown": "deadline: unknown whether it is met (no runtime or start estimate; give goal.tokens)",
    "deadline_met": "deadline: finishes {margin} before it, after a runtime of {runtime}",
    "deadline_missed": "deadline: misses it by {late}, after a runtime of {runtime}",
    "cost_unknown": "max_cost: unknown total (no runtime estimate); {hourly} per hour",
    "cost_within": "max_cost: {cost} ≤ {limit}",
    "cost_over": "max_cost: {cost} > {limit}",
    "latency_met": "latency: {latency} ms per token ≤ {target} ms",
    "latency_missed": "latency: {latency} ms per token > {target} ms",
    "throughput_met": "throughput: {rate} tokens/s ≥ {target}",
    "throughput_missed": "throughput: {rate} tokens/s < {target}",
}
# Why a pool is left out, by code (the same scheme as NOTES).
EXCLUDED = {
    "task_type": "does not take {task_type} work: {why}",
    "too_big": "{variant} split needs {devices} × {model}; the pool has {capacity}",
    "precision": "{model} has no {precision} support (features: {features})",
    "activations": "one micro-batch's activations ({activations} GiB) exceed {usable} GiB even split {ways} ways",
    "plan": "{why}",
}
WHERE = {
    "one_node": "one node",
    "nodes": "{nodes} nodes",
    "replicas": "{replicas} replicas of {size}",
}


def excluded_pool(pool: str, pool_model: str | None, code: str, params: dict[str, str]) -> dict:
    """A pool left out: {pool, model, reason (English), code, params}."""
    return {"pool": pool, "model": pool_model, "reason": EXCLUDED[code].format(**params), "code": code, "params": params}


def note(option: Option, code: str, **params: str) -> None:
    option.notes.append({"code": code, "params": params})
    option.reasons.append(NOTES[code].format(**params))


def judge(option: Option, goal: Goal, now: datetime) -> None:
    """Fill `meets` and the reasons (`notes`, and `reasons` in English): each target the
    goal states, met or not, and why."""
    sizing = option.sizing
    where_code, layout, where = _where(option)
    note(
        option,
        "split",
        count=str(option.count),
        model=option.model,
        where=where,
        per_device=f"{sizing['per_device_gib']:.1f}",
        usable=f"{sizing['usable_gib']:.1f}",
    )
    # The layout as a code and its numbers too, for saying it in another language.
    option.notes[-1]["params"] |= {"where_code": where_code, "parallel": _parallel(option), **layout}
    for n in sizing.get("notes", []):
        note(option, n["code"], **n["params"])
    if option.estimated_start is None:
        note(option, "no_start")
    elif option.startable_now:
        note(option, "starts_now")
    else:
        note(option, "starts_in", wait=format_duration((option.estimated_start - now).total_seconds()))
    _judge_deadline(option, goal, now)
    if goal.max_cost is not None:
        cost = option.cost
        if cost is None:
            option.meets["max_cost"] = False
            note(option, "cost_unknown", hourly=f"{option.cost_per_hour:,.2f}")
        else:
            option.meets["max_cost"] = cost <= goal.max_cost
            note(option, "cost_within" if option.meets["max_cost"] else "cost_over", cost=f"{cost:,.2f}", limit=f"{goal.max_cost:,.2f}")
    if goal.latency_ms is not None:
        latency = sizing.get("latency_ms")
        option.meets["latency"] = latency is not None and latency <= goal.latency_ms
        shown = f"{latency:.1f}" if latency is not None else "?"
        note(option, "latency_met" if option.meets["latency"] else "latency_missed", latency=shown, target=f"{goal.latency_ms:g}")
    if goal.throughput_tokens_per_s is not None:
        rate = sizing.get("tokens_per_s") or 0.0
        option.meets["throughput"] = rate >= goal.throughput_tokens_per_s
        code = "throughput_met" if option.meets["throughput"] else "throughput_missed"
        note(option, code, rate=f"{rate:,.0f}", target=f"{goal.throughput_tokens_per_s:,.0f}")


def _judge_deadline(option: Option, goal: Goal, now: datetime) -> None:
    deadline = goal.deadline_at(now)
    if deadline is None:
        return
    completion = option.estimated_completion
    if completion is None:
        option.meets["deadline"] = False
        note(option, "deadline_unknown")
        return
    option.meets["deadline"] = completion <= deadline
    left = (deadline - completion).total_seconds()
    runtime = format_duration(option.runtime_s)
    if left >= 0:
        note(option, "deadline_met", margin=format_duration(left), runtime=runtime)
    else:
        note(option, "deadline_missed", late=format_duration(-left), runtime=runtime)


def _where(option: Option) -> tuple[str, dict[str, str], str]:
    """How the devices are laid out: a WHERE code, its numbers, and the English words."""
    p = option.sizing.get("parallelism", {})
    replicas = p.get("replicas", 1)
    if replicas > 1:
        code, params = "replicas", {"replicas": str(replicas), "size": str(option.devices_per_worker * p.get("pipeline", 1))}
    elif option.workers > 1:
        code, params = "nodes", {"nodes": str(option.workers)}
    else:
        code, params = "one_node", {}
    words = WHERE[code].format(**params)
    parallel = _parallel(option)
    return code, params, (f"{words} ({parallel})" if parallel else words)


def _parallel(option: Option) -> str:
    """Data / tensor / pipeline parallel degrees above 1, as DP/TP/PP (the same in every language)."""
    p = option.sizing.get("parallelism", {})
    names = {"data": "DP", "tensor": "TP", "pipeline": "PP"}
    return " · ".join(f"{names[k]} {p[k]}" for k in ("data", "tensor", "pipeline") if p.get(k, 1) > 1 and not (k == "data" and p.get("replicas")))


def rank_key(option: Option) -> tuple:
    missed = sum(1 for ok in option.meets.values() if not ok)
    completion = option.estimated_completion or option.estimated_start
    when = completion.timestamp() if completion else float("inf")
    cost = option.cost if option.cost is not None else option.cost_per_hour
    return (missed, when, cost, option.count, option.pool)


def rank(options: list[Option]) -> list[Option]:
    return sorted(options, key=rank_key)


def fallback_orders(options: list[Option]) -> None:
    """Each option's task tries its pool, then the identical pools planned with it, then the
    pools of the options after it that need the same split of the same device class (a
    pool of another split is another task)."""
    for i, option in enumerate(options):
        split = (option.device_class, option.count, option.workers)
        later = [p for o in options[i + 1 :] if (o.device_class, o.count, o.workers) == split for p in o.task.get("fallback", [o.pool])]
        option.task["fallback"] = list(dict.fromkeys([option.pool, *option.task.get("fallback", []), *later]))
