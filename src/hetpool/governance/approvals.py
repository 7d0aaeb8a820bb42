"""Approval rules as small objects (after Prefect's orchestration rules): each rule looks
at the facts of one request and says why it needs approval, or nothing.

An ApprovalPolicy turns into rules, one per threshold it sets. `evaluate` runs the rules
of every policy that applies to the tenant and collects the reasons; the server gathers
the facts (quota, budget, reserved pools) first, and only those some rule needs, since
they cost database reads.

Besides tasks, policies govern objects: a Quota change or delete by someone below
platform-admin (`quota_changes`), and deleting or loosening a Budget or ApprovalPolicy
(`governance_changes`, platform-admins included: only they may write those kinds).
`loosens` says whether a change of such an object gives more room than before. Who may
not decide a request is in governance.duties.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from pydantic import BaseModel

from hetpool.core.governance import ApprovalPolicySpec, BudgetSpec
from hetpool.core.tasks import TaskSpec
from hetpool.core.units import format_duration, parse_duration
from hetpool.scheduling.assign import candidate_groups
from hetpool.scheduling.filters import CompatCheck, class_matches, pool_verdict
from hetpool.scheduling.snapshot import Snapshot

# Facts that cost a lookup; a rule lists the ones it reads in NEEDS.
FACT_OVER_QUOTA = "over_quota"
FACT_BUDGET = "budget"
FACT_RESERVED_POOLS = "reserved_pools"


@dataclass(frozen=True)
class ApprovalContext:
    """What the rules may look at. For a task: its tenant, environment, size, runtime and
    the looked-up facts; for a governed object (kind quota, budget or approvalpolicy): its
    tenant ('' for one that applies to every tenant), name, whether it is applied or
    deleted, whether that loosens it, and whether a platform-admin does it."""

    kind: str  # task | quota | budget | approvalpolicy
    tenant: str
    env: str | None = None
    devices: float = 0.0
    runtime_s: float | None = None
    over_quota: str | None = None
    budget: str | None = None
    reserved_pools: tuple[str, ...] = ()
    by_platform_admin: bool = False
    object_name: str | None = None
    operation: str = "apply"  # apply | delete
    loosens: bool = False

    @classmethod
    def for_task(cls, spec: TaskSpec, **facts) -> ApprovalContext:
        return cls(kind="task", tenant=spec.tenant, env=spec.env.value, devices=task_devices(spec), runtime_s=task_runtime_s(spec), **facts)


def task_devices(spec: TaskSpec) -> float:
    """Devices of all workers together (a slice counts as its fraction)."""
    demand = spec.per_worker.devices
    return spec.workers * demand.count if demand is not None else 0.0


def task_runtime_s(spec: TaskSpec) -> float | None:
    """The longer of the runtime estimate and max_runtime: either may be what holds devices."""
    values = [parse_duration(v) for v in (spec.runtime_estimate, spec.max_runtime) if v]
    return max(values) if values else None


class Rule(ABC):
    """One reason a request may need approval. KINDS: the requests it looks at."""

    name: ClassVar[str]
    KINDS: ClassVar[frozenset[str]] = frozenset({"task"})
    NEEDS: ClassVar[frozenset[str]] = frozenset()

    @abstractmethod
    def check(self, context: ApprovalContext) -> str | None:
        """Why `context` needs approval under this rule, or None."""


@dataclass(frozen=True)
class OverQuota(Rule):
    name: ClassVar[str] = "over_quota"
    NEEDS: ClassVar[frozenset[str]] = frozenset({FACT_OVER_QUOTA})

    def check(self, context: ApprovalContext) -> str | None:
        return f"over quota: {context.over_quota}" if context.over_quota else None


@dataclass(frozen=True)
class ReservedPool(Rule):
    name: ClassVar[str] = "reserved_pool"
    NEEDS: ClassVar[frozenset[str]] = frozenset({FACT_RESERVED_POOLS})

    def check(self, context: ApprovalContext) -> str | None:
        if not context.reserved_pools:
            return None
        return f"may run on reserved pool(s) {', '.join(context.reserved_pools)}"


@dataclass(frozen=True)
class MaxDevices(Rule):
    limit: float
    name: ClassVar[str] = "max_devices"

    def check(self, context: ApprovalContext) -> str | None:
        if context.devices > self.limit + 1e-9:
            return f"asks for {context.devices:g} devices; more than {self.limit:g} need approval"
        return None


@dataclass(frozen=True)
class MaxRuntime(Rule):
    limit: str
    name: ClassVar[str] = "max_runtime"

    def check(self, context: ApprovalContext) -> str | None:
        if context.runtime_s is not None and context.runtime_s > parse_duration(self.limit):
            return f"may run {format_duration(context.runtime_s)}; longer than {self.limit} needs approval"
        return None


@dataclass(frozen=True)
class Environment(Rule):
    environments: frozenset[str]
    name: ClassVar[str] = "environment"

    def check(self, context: ApprovalContext) -> str | None:
        if context.env in self.environments:
            return f"environment {context.env} needs approval"
        return None


@dataclass(frozen=True)
class BudgetExceeded(Rule):
    name: ClassVar[str] = "budget_exceeded"
    NEEDS: ClassVar[frozenset[str]] = frozenset({FACT_BUDGET})

    def check(self, context: ApprovalContext) -> str | None:
        return f"budget exceeded: {context.budget}" if context.budget else None


@dataclass(frozen=True)
class QuotaChange(Rule):
    name: ClassVar[str] = "quota_change"
    KINDS: ClassVar[frozenset[str]] = frozenset({"quota"})

    def check(self, context: ApprovalContext) -> str | None:
        if context.by_platform_admin:
            return None
        what = "deleting a quota" if context.operation == "delete" else "a quota change"
        return f"{what} for {context.tenant} by someone other than a platform-admin needs approval"


@dataclass(frozen=True)
class GovernanceChange(Rule):
    """Deleting or loosening a Budget or ApprovalPolicy, by anyone: a policy that governs
    itself cannot be switched off by the one it binds."""

    name: ClassVar[str] = "governance_change"
    KINDS: ClassVar[frozenset[str]] = frozenset({"budget", "approvalpolicy"})

    def check(self, context: ApprovalContext) -> str | None:
        if not context.loosens:
            return None
        kind = "Budget" if context.kind == "budget" else "ApprovalPolicy"
        what = "deleting" if context.operation == "delete" else "loosening"
        where = context.tenant or "every tenant"
        return f"{what} {kind} {context.object_name} (for {where}) needs the approval of another platform-admin"


def rules_of(policy: ApprovalPolicySpec) -> list[Rule]:
    """One rule per threshold the policy sets, in a fixed order (reasons read the same way each time)."""
    rules: list[Rule] = []
    if policy.over_quota:
        rules.append(OverQuota())
    if policy.reserved_pools:
        rules.append(ReservedPool())
    if policy.max_devices is not None:
        rules.append(MaxDevices(policy.max_devices))
    if policy.max_runtime is not None:
        rules.append(MaxRuntime(policy.max_runtime))
    if policy.environments:
        rules.append(Environment(frozenset(e.value for e in policy.environments)))
    if policy.budget_exceeded:
        rules.append(BudgetExceeded())
    if policy.quota_changes:
        rules.append(QuotaChange())
    if policy.governance_changes:
        rules.append(GovernanceChange())
    return rules


def policies_for(policies: list[ApprovalPolicySpec], tenant: str) -> list[ApprovalPolicySpec]:
    """Policies of the tenant or an ancestor (or of every tenant), by name. Tenant '': an
    object of every tenant, governed by the policies of every tenant only."""
    return sorted(
        (p for p in policies if p.tenant is None or (tenant and (tenant == p.tenant or tenant.startswith(p.tenant + "/")))),
        key=lambda p: p.name,
    )


def needed_facts(policies: list[ApprovalPolicySpec], kind: str) -> set[str]:
    return {fact for policy in policies for rule in rules_of(policy) if kind in rule.KINDS for fact in rule.NEEDS}


@dataclass(frozen=True)
class Reason:
    rule: str
    message: str
    policy: str

    def to_dict(self) -> dict:
        return {"rule": self.rule, "message": self.message, "policy": self.policy}


@dataclass(frozen=True)
class ApprovalVerdict:
    reasons: tuple[Reason, ...] = ()
    policies: tuple[str, ...] = ()
    approvers: tuple[str, ...] = ()
    expire_after: str | None = None

    @property
    def needed(self) -> bool:
        return bool(self.reasons)

    @property
    def rules(self) -> set[str]:
        return {r.rule for r in self.reasons}

    def summary(self) -> str:
        return "; ".join(r.message for r in self.reasons)


def evaluate(policies: list[ApprovalPolicySpec], context: ApprovalContext) -> ApprovalVerdict:
    """Run the rules of the applicable policies. Tripped policies give their named
    approvers; the request expires after the shortest of their `expire_after` (the
    strictest policy wins). A reason two policies share is listed once."""
    reasons: list[Reason] = []
    tripped: list[ApprovalPolicySpec] = []
    for policy in policies_for(policies, context.tenant):
        hits = [(rule.name, msg) for rule in rules_of(policy) if context.kind in rule.KINDS and (msg := rule.check(context))]
        if not hits:
            continue
        tripped.append(policy)
        seen = {(r.rule, r.message) for r in reasons}
        reasons.extend(Reason(name, msg, policy.name) for name, msg in hits if (name, msg) not in seen)
    if not tripped:
        return ApprovalVerdict()
    approvers = tuple(sorted({a for p in tripped for a in p.approvers}))
    expire_after = min((p.expire_after for p in tripped), key=parse_duration)
    return ApprovalVerdict(tuple(reasons), tuple(p.name for p in tripped), approvers, expire_after)


def reserved_pools_for(snap: Snapshot, spec: TaskSpec, compat_check: CompatCheck, allowed_pools: set[str] | None = None) -> tuple[str, ...]:
    """Reserved pools this task may land on: among its candidates, of its queue, and let
    in by the reservation (its tenant or priority). Pools it may not use are no concern."""
    demand = spec.per_worker.devices
    use_class = not (spec.fallback or spec.any_of or (demand is not None and demand.models))
    names = set()
    for group in candidate_groups(snap, spec):
        for index in group.pools:
            pool = snap.pools[index]
            if pool.spec.reserved_for is None or pool.name in names:
                continue
            if use_class and not class_matches(pool, demand.device_class if demand else None):
                continue
            if allowed_pools is not None and pool.name not in allowed_pools and pool.model.name not in allowed_pools:
                continue
            if pool_verdict(pool, spec, compat_check).ok:
                names.add(pool.name)
    return tuple(sorted(names))


# ------------------------------------------------------------- loosening an object
# What "tighter or the same" means per field; a change of any other field (tenant,
# period, currency, ...) counts as loosening, labels and description as nothing.
_IGNORED = frozenset({"kind", "name", "description", "labels"})


def _bool_kept(old: bool, new: bool) -> bool:
    return new or not old


def _limit_kept(old: float | None, new: float | None) -> bool:
    return old is None or (new is not None and new <= old)


def _duration_kept(old: str | None, new: str | None) -> bool:
    return old is None or (new is not None and parse_duration(new) <= parse_duration(old))


def _superset(old: list, new: list) -> bool:
    return set(old) <= set(new)


def _subset(old: list, new: list) -> bool:
    return set(new) <= set(old)


_TIGHTER: dict[type, dict[str, Callable]] = {
    BudgetSpec: {"amount": _limit_kept, "hard_stop": _bool_kept, "alert_at": _superset},
    ApprovalPolicySpec: {
        **{f: _bool_kept for f in ("over_quota", "reserved_pools", "budget_exceeded", "quota_changes", "governance_changes")},
        "max_devices": _limit_kept,
        "max_runtime": _duration_kept,
        "environments": _superset,
        "approvers": _subset,  # a named approver more is one more person who may say yes
        "expire_after": _duration_kept,
    },
}


def loosens(current: BaseModel | None, new: BaseModel | None) -> bool:
    """Does replacing `current` by `new` (None: absent) give more room? Deleting does; a
    new Budget does not; a new ApprovalPolicy does only when it names approvers (they
    would decide requests its rules trip)."""
    if current is None:
        return isinstance(new, ApprovalPolicySpec) and bool(new.approvers)
    if new is None:
        return True
    tighter = _TIGHTER.get(type(current), {})
    for field in type(current).model_fields:
        if field in _IGNORED:
            continue
        old_value, new_value = getattr(current, field), getattr(new, field)
        if old_value == new_value:
            continue
        kept = tighter.get(field)
        if kept is None or not kept(old_value, new_value):
            return True
    return False
