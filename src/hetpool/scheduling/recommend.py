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
            "sizing": self.sizing,
            "task": self.task,
        }


def judge(option: Option, goal: Goal, now: datetime) -> None:
    """Fill `meets` and `reasons`: each target the goal states, met or not, and why."""
    sizing = option.sizing
    option.reasons.append(
        f"{option.count} × {option.model} ({_split(option)}), {sizing['per_device_gib']:.1f} GiB of {sizing['usable_gib']:.1f} GiB usable per device"
    )
    option.reasons.extend(sizing.get("notes", []))
    if option.estimated_start is None:
        option.reasons.append("no start estimate: the pool is busy with work of unknown length")
    elif option.startable_now:
        option.reasons.append("can start now")
    else:
        option.reasons.append(f"estimated start in {format_duration((option.estimated_start - now).total_seconds())}")
    deadline = goal.deadline_at(now)
    completion = option.estimated_completion
    if deadline is not None:
        if completion is None:
            option.meets["deadline"] = False
            option.reasons.append("deadline: unknown whether it is met (no runtime or start estimate; give goal.tokens)")
        else:
            option.meets["deadline"] = completion <= deadline
            left = (deadline - completion).total_seconds()
            runtime = format_duration(option.runtime_s)
            if left >= 0:
                option.reasons.append(f"deadline: finishes {format_duration(left)} before it, after a runtime of {runtime}")
            else:
                option.reasons.append(f"deadline: misses it by {format_duration(-left)}, after a runtime of {runtime}")
    if goal.max_cost is not None:
        cost = option.cost
        if cost is None:
            option.meets["max_cost"] = False
            option.reasons.append(f"max_cost: unknown total (no runtime estimate); {option.cost_per_hour:.2f} per hour")
        else:
            option.meets["max_cost"] = cost <= goal.max_cost
            option.reasons.append(f"max_cost: {cost:,.2f} {'≤' if cost <= goal.max_cost else '>'} {goal.max_cost:,.2f}")
    if goal.latency_ms is not None:
        latency = sizing.get("latency_ms")
        option.meets["latency"] = latency is not None and latency <= goal.latency_ms
        option.reasons.append(f"latency: {latency:.1f} ms per token {'≤' if option.meets['latency'] else '>'} {goal.latency_ms:g} ms")
    if goal.throughput_tokens_per_s is not None:
        rate = sizing.get("tokens_per_s") or 0.0
        option.meets["throughput"] = rate >= goal.throughput_tokens_per_s
        option.reasons.append(f"throughput: {rate:,.0f} tokens/s {'≥' if option.meets['throughput'] else '<'} {goal.throughput_tokens_per_s:,.0f}")


def _split(option: Option) -> str:
    p = option.sizing.get("parallelism", {})
    parts = [f"{k} {v}" for k, v in p.items() if k in ("data", "tensor", "pipeline") and v and v > 1 and not (k == "data" and p.get("replicas"))]
    replicas = p.get("replicas", 1)
    if replicas > 1:
        where = f"{replicas} replicas of {option.devices_per_worker * p.get('pipeline', 1)}"
    else:
        where = f"{option.workers} nodes" if option.workers > 1 else "one node"
    return ", ".join([where, *parts]) if parts else where


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
