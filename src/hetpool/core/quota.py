"""Quotas: how much of which resource a tenant subtree may hold, per environment and task
type, with a nominal amount, a borrowing limit and a lending limit (after Kueue's
ClusterQueue / cohort model).

A quota applies to a task when the task's tenant is the quota's tenant or below it, and
its environment and task type match (an unset one matches all). A task is charged to
every applicable quota, up the tree. Beyond its nominal amount a tenant may borrow what
its siblings (quotas with the same parent tenant, environment, type and resource) leave
idle, within its borrowing limit and their lending limits; work admitted that way is
*borrowing* and is the first preempted when a lender needs its quota back.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from hetpool.core.base import Name, ObjectSpec, ShortText, SpecModel
from hetpool.core.inventory import TaskType
from hetpool.core.limits import QuotaAmount
from hetpool.core.tenancy import Environment, validate_tenant_path

# Resources a limit may name besides a device model or a pool.
DEVICE_CLASSES = ("gpu", "npu", "dpu", "cpu")
NORMALISED = "a100-equivalent"  # devices x relative performance for the task type (reference device = 1.0)
CPU_CORES = "cpu-cores"
MEMORY_GB = "memory-gb"
SPECIAL_RESOURCES = (*DEVICE_CLASSES, NORMALISED, CPU_CORES, MEMORY_GB)


class QuotaLimit(SpecModel):
    resource: ShortText = Field(
        min_length=1, description="a device model, a pool, a device class (gpu, npu, dpu), a100-equivalent, cpu-cores or memory-gb"
    )
    nominal: QuotaAmount = Field(description="guaranteed amount (devices, device-equivalents, cores or GB)")
    borrowing_limit: QuotaAmount | None = Field(default=None, description="how far above nominal it may borrow; unset: no limit")
    lending_limit: QuotaAmount | None = Field(default=None, description="how much of its idle nominal siblings may borrow; unset: all of it")

    @field_validator("resource")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.strip().lower()


class QuotaSpec(ObjectSpec):
    kind: Literal["Quota"] = "Quota"
    name: Name
    tenant: str
    env: Environment | None = Field(default=None, description="dev, test or prod; unset: every environment")
    task_type: TaskType | None = Field(default=None, alias="type", description="unset: every task type")
    limits: list[QuotaLimit] = Field(min_length=1)

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return validate_tenant_path(value)

    @model_validator(mode="after")
    def _unique_resources(self) -> QuotaSpec:
        resources = [limit.resource for limit in self.limits]
        if len(resources) != len(set(resources)):
            raise ValueError("limits: a resource is listed twice")
        return self

    def applies_to(self, tenant: str, env: str, task_type: str) -> bool:
        return (
            (tenant == self.tenant or tenant.startswith(self.tenant + "/"))
            and (self.env is None or self.env.value == env)
            and (self.task_type is None or self.task_type.value == task_type)
        )
