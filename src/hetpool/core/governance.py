"""Governance objects applied like inventory: approval policies, price lists, budgets and
reclaim policies. Quotas live in quota.py. Each class is owned by its area (approvals,
cost, reclaim); fields may grow, but names and kinds are the contract."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from hetpool.core.base import Name, ObjectSpec, ShortTexts, SpecModel
from hetpool.core.inventory import TaskType
from hetpool.core.limits import MAX_DEVICES_PER_TASK, Amount, Price, bounded
from hetpool.core.tenancy import Environment, validate_tenant_path
from hetpool.core.units import check_duration


def _duration(value: str | None) -> str | None:
    return check_duration(value)  # at most MAX_DURATION_S (366 days)


# ----------------------------------------------------------------------- approvals
# Task labels the approvals area reads or writes. The submitter may give a reason; the
# marker is set by the server only (submit refuses it) when an approver lets a task past
# its quota, so the quota engine admits it beyond nominal + borrowing. Value: "true".
APPROVAL_REASON_LABEL = "hetpool.io/approval-reason"
APPROVED_OVER_QUOTA_LABEL = "hetpool.io/approved-over-quota"


class ApprovalPolicySpec(ObjectSpec):
    """When tasks (and quota changes) need someone's approval, and who may give it.

    Applies to tasks of `tenant` and below (unset: every tenant). Each set threshold is a
    rule; a task that trips any rule waits in `pending_approval` with the reasons."""

    kind: Literal["ApprovalPolicy"] = "ApprovalPolicy"
    name: Name
    tenant: str | None = None
    over_quota: bool = Field(default=True, description="a task that would exceed its quota (beyond borrowing) needs approval")
    reserved_pools: bool = Field(default=False, description="a task that may land on a reserved pool needs approval")
    max_devices: bounded(0, le=MAX_DEVICES_PER_TASK) | None = Field(
        default=None, description="tasks asking for more devices (all workers) need approval"
    )
    max_runtime: str | None = Field(default=None, description="tasks whose runtime estimate or max_runtime is longer need approval")
    environments: list[Environment] = Field(default=[], description="tasks in these environments need approval (e.g. [prod])")
    budget_exceeded: bool = Field(default=True, description="a task of a tenant over its budget needs approval")
    quota_changes: bool = Field(default=True, description="Quota changes and deletes by non-platform-admins need approval")
    governance_changes: bool = Field(
        default=False,
        description="deleting or loosening a Budget or ApprovalPolicy of the tenant needs a second platform-admin's approval"
        " (off by default: a lone platform-admin has nobody to ask)",
    )
    approvers: ShortTexts = Field(default=[], description="users who may approve, besides tenant-admins up the tree")
    expire_after: str = Field(default="24h", description="requests not decided in time expire (the task never runs)")

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        return validate_tenant_path(value) if value else None

    @field_validator("max_runtime", "expire_after")
    @classmethod
    def _durations(cls, value: str | None) -> str | None:
        return _duration(value)


# ----------------------------------------------------------------------------- cost
class ModelPrice(SpecModel):
    model: Name
    per_device_hour: Price


class PriceListSpec(ObjectSpec):
    """Prices per device-hour per model, per CPU-core-hour and per GiB-hour of memory.
    A price list with `cluster` set overrides the global one (no cluster) for that cluster;
    a pool's own `price_per_hour` (when > 0) overrides both for its devices. Unset CPU and
    memory prices (and models not listed) fall through to the global list, then to 0."""

    kind: Literal["PriceList"] = "PriceList"
    name: Name
    cluster: Name | None = None
    currency: str = Field(default="CNY", pattern=r"^[A-Z]{3}$", description="ISO 4217 code")
    devices: list[ModelPrice] = []
    per_cpu_core_hour: Price | None = Field(default=None, description="unset: the global list's price, else 0")
    per_memory_gib_hour: Price | None = Field(default=None, description="unset: the global list's price, else 0")

    @field_validator("devices")
    @classmethod
    def _unique_models(cls, value: list[ModelPrice]) -> list[ModelPrice]:
        models = [p.model for p in value]
        if len(models) != len(set(models)):
            raise ValueError("devices: each model may be priced once per list")
        return value


class BudgetSpec(ObjectSpec):
    """Spending limit of a tenant subtree per period, with alerts and an optional hard stop."""

    kind: Literal["Budget"] = "Budget"
    name: Name
    tenant: str
    period: Literal["month", "week", "day"] = "month"
    amount: Amount = Field(description="at most 1e12")
    currency: str | None = Field(default=None, pattern=r"^[A-Z]{3}$", description="count only ledger rows in this currency (unset: all)")
    alert_at: list[bounded(gt=0, le=10)] = Field(default=[0.8, 1.0], description="fractions of the amount at which an alert is raised")
    hard_stop: bool = Field(default=False, description="refuse new tasks of the subtree once the amount is spent")

    @field_validator("alert_at")
    @classmethod
    def _fractions(cls, value: list[float]) -> list[float]:
        if any(f <= 0 or f > 10 for f in value):
            raise ValueError("alert_at: fractions of the amount, each > 0 (1.0 = the whole amount)")
        return sorted(set(value))

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return validate_tenant_path(value)


# -------------------------------------------------------------------------- reclaim
class ReclaimPolicySpec(ObjectSpec):
    """Taking back capacity that is held but not used: idle allocations and leases past
    their maximum runtime. Applies to tasks of `tenant` and below (unset: all)."""

    kind: Literal["ReclaimPolicy"] = "ReclaimPolicy"
    name: Name
    tenant: str | None = None
    task_types: list[TaskType] = Field(default=[], description="unset: every task type")
    idle_utilisation_pct: bounded(0, le=100) = Field(default=5.0, description="devices below this utilisation count as idle")
    idle_for: str | None = Field(default="30m", description="reclaim allocations idle this long (unset: never for idleness)")
    max_runtime: str | None = Field(default=None, description="default lease for tasks without their own max_runtime")
    notice: str = Field(default="5m", description="time between the notice and the action")
    action: Literal["stop", "requeue"] = "requeue"

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str | None) -> str | None:
        return validate_tenant_path(value) if value else None

    @field_validator("idle_for", "max_runtime", "notice")
    @classmethod
    def _durations(cls, value: str | None) -> str | None:
        return _duration(value)
