"""Reclaim decisions: idle allocations and leases past their maximum runtime.

Pure: the caller gathers the facts of one running task (its latest device utilisation,
how long it has been idle so far, a notice already given) and applies the decision. The
flow is always notice first, then act once the notice period has passed; a task that is
busy again during an idle notice keeps its devices (the notice is cancelled).

Evidence rules, chosen so that missing data never takes capacity away:
- a sample counts only if it reports every device the task holds, all taken after the
  task started; anything else is "unknown" and neither starts nor ends idleness;
- idle means every held device is below the policy's threshold; one busy device makes
  the task busy (a multi-device job often keeps only some devices loaded at a time).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from hetpool.core.governance import ReclaimPolicySpec
from hetpool.core.units import format_duration, parse_duration

Action = Literal["stop", "requeue"]
Cause = Literal["idle", "max_runtime"]
# A lease the task set itself (or got from its template) is enforced even where no policy
# applies; rerunning a task that overran its own limit would only overrun again, so: stop.
DEFAULT_NOTICE = "5m"
DEFAULT_ACTION: Action = "stop"


@dataclass(frozen=True)
class DeviceUse:
    node: str
    index: int  # within the node's devices of the placement's model, as agents report it
    utilisation_pct: float | None  # None: not reported


@dataclass(frozen=True)
class UsageSample:
    at: datetime  # when the oldest of the reports it is built from was taken
    devices: tuple[DeviceUse, ...]  # one per device the task holds


@dataclass(frozen=True)
class Notice:
    cause: Cause
    reason: str
    given_at: datetime
    act_at: datetime
    action: Action
    policy: str | None = None


@dataclass(frozen=True)
class TaskFacts:
    task_id: str
    tenant: str
    task_type: str
    started_at: datetime | None
    max_runtime: str | None = None  # the task's own, else its template's
    devices_held: int = 0
    sample: UsageSample | None = None
    idle_since: datetime | None = None
    notice: Notice | None = None


@dataclass(frozen=True)
class Decision:
    kind: Literal["none", "notice", "act", "cancel_notice"]
    idle_since: datetime | None  # the idleness state to keep for the next pass
    reason: str = ""
    notice: Notice | None = None  # the notice given ("notice") or acted on ("act") or withdrawn


def policy_for(policies: Iterable[ReclaimPolicySpec], tenant: str, task_type: str) -> ReclaimPolicySpec | None:
    """The most specific policy for the task: the deepest matching tenant wins (a team's
    policy overrides its org's), then one naming the task type, then the first by name."""
    best, best_key = None, None
    for p in policies:
        if p.tenant and tenant != p.tenant and not tenant.startswith(p.tenant + "/"):
            continue
        if p.task_types and task_type not in {t.value for t in p.task_types}:
            continue
        key = (-(p.tenant.count("/") + 1 if p.tenant else 0), 0 if p.task_types else 1, p.name)
        if best_key is None or key < best_key:
            best, best_key = p, key
    return best


def classify(sample: UsageSample | None, facts: TaskFacts, threshold_pct: float) -> Literal["idle", "busy", "unknown"]:
    if sample is None or facts.devices_held <= 0 or len(sample.devices) < facts.devices_held:
        return "unknown"
    if facts.started_at is not None and sample.at < facts.started_at:
        return "unknown"  # a report from before the task ran says nothing about it
    if any(d.utilisation_pct is None for d in sample.devices):
        return "unknown"
    return "idle" if all(d.utilisation_pct < threshold_pct for d in sample.devices) else "busy"


def describe_devices(devices: Iterable[DeviceUse]) -> str:
    by_node: dict[str, list[int]] = {}
    for d in devices:
        by_node.setdefault(d.node, []).append(d.index)
    return ", ".join(f"{node} devices [{','.join(str(i) for i in sorted(set(idx)))}]" for node, idx in by_node.items())


def _busiest(devices: Iterable[DeviceUse]) -> DeviceUse:
    return max(devices, key=lambda d: d.utilisation_pct or 0.0)


def decide(policies: Iterable[ReclaimPolicySpec], facts: TaskFacts, now: datetime) -> Decision:
    policy = policy_for(policies, facts.tenant, facts.task_type)
    watch_idle = policy is not None and policy.idle_for is not None
    state = classify(facts.sample, facts, policy.idle_utilisation_pct) if watch_idle else "unknown"
    idle_since = facts.idle_since if watch_idle else None
    if state == "idle":
        idle_since = idle_since or facts.sample.at
    elif state == "busy":
        idle_since = None

    lease_text = facts.max_runtime or (policy.max_runtime if policy else None)
    overran = None
    if lease_text and facts.started_at is not None:
        ran = (now - facts.started_at).total_seconds()
        if ran >= parse_duration(lease_text):
            overran = f"past max_runtime {lease_text} (ran {format_duration(ran)})"

    notice = facts.notice
    if notice is not None:
        if notice.cause == "idle":
            if state == "busy":
                use = _busiest(facts.sample.devices)
                why = f"busy again: {use.utilisation_pct:g}% on {use.node} device {use.index}"
                return Decision("cancel_notice", idle_since, why, notice)
            if not watch_idle:
                return Decision("cancel_notice", idle_since, "no reclaim policy watches this task's idleness any more", notice)
            if state == "unknown":
                return Decision("none", idle_since)  # no fresh evidence that it is still idle: wait
        elif overran is None:
            return Decision("cancel_notice", idle_since, "no longer past a max_runtime (the lease was changed)", notice)
        if now >= notice.act_at:
            return Decision("act", idle_since, notice.reason, notice)
        return Decision("none", idle_since)

    action: Action = policy.action if policy else DEFAULT_ACTION
    period = parse_duration(policy.notice if policy else DEFAULT_NOTICE)
    given = Notice(
        cause="max_runtime", reason="", given_at=now, act_at=now + timedelta(seconds=period), action=action, policy=policy.name if policy else None
    )
    if overran:
        return Decision("notice", idle_since, overran, replace(given, reason=overran))
    if state == "idle" and watch_idle:
        idle_s = (facts.sample.at - idle_since).total_seconds()
        if idle_s >= parse_duration(policy.idle_for):
            why = f"idle below {policy.idle_utilisation_pct:g}% for {format_duration(idle_s)} on {describe_devices(facts.sample.devices)}"
            return Decision("notice", idle_since, why, replace(given, cause="idle", reason=why))
    return Decision("none", idle_since)
