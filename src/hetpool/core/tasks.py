"""Task and template specs: what a user asks for, by goal.

A template gives defaults per task type; a task names a template and overrides fields.
`fallback` is an ordered list (try in that order); `any_of` is a set (the platform
chooses). Both at once is an error.
"""

from __future__ import annotations

import re
from enum import StrEnum
from functools import cached_property
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import Field, field_validator, model_validator

from hetpool.core.base import Command, EnvVars, Labels, Name, ObjectSpec, ShortText, ShortTexts, SpecModel, Text
from hetpool.core.checkpoint import CheckpointSpec
from hetpool.core.goal import Goal, GoalFields
from hetpool.core.inventory import DeviceClass, TaskType
from hetpool.core.limits import (
    MAX_DEVICE_MEMORY_GB,
    MAX_DEVICES_PER_WORKER,
    MAX_WORKERS,
    Cores,
    DeviceMemoryGB,
    MemoryGB,
    PerfFactor,
    bounded,
)
from hetpool.core.tenancy import Environment, validate_tenant_path
from hetpool.core.units import Duration, parse_duration


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    CRITICAL = "critical"

    @property
    def rank(self) -> int:
        return _PRIORITY_RANK[self]


_PRIORITY_RANK = {Priority.LOW: 0, Priority.NORMAL: 1, Priority.HIGH: 2, Priority.CRITICAL: 3}


def parse_version_spec(value: str) -> SpecifierSet:
    """A PEP 440 specifier; a bare version "2.4" means "==2.4.*"."""
    text = value.strip()
    if not text or text == "*":
        return SpecifierSet("")
    if text[0].isdigit():
        # "2.4" means any 2.4.x; a full or pre-release version ("2.4.1", "2.4rc1") is exact.
        if re.fullmatch(r"\d+(\.\d+)?", text):
            text = f"=={text}.*"
        elif re.fullmatch(r"\d+(\.\d+)*([a-z]+\d*)?(\.post\d+)?(\.dev\d+)?", text):
            text = f"=={text}"
        else:
            raise ValueError(f"invalid version spec {value!r}: use e.g. '2.4', '>=2.3,<2.6' or '==2.4.1'")
    try:
        return SpecifierSet(text)
    except InvalidSpecifier as exc:
        raise ValueError(f"invalid version spec {value!r}: use e.g. '2.4', '>=2.3,<2.6' or '==2.4.1'") from exc


class FrameworkRequest(SpecModel):
    name: ShortText = Field(min_length=1, description="pytorch, mindspore, tensorflow, paddle, jax, none")
    version: ShortText = Field(default="", description="PEP 440 spec, e.g. '>=2.3,<2.6'; '2.4' means 2.4.*")
    extras: Labels = Field(default={}, description="extra packages and version specs, e.g. {vllm: '>=0.6'}")

    @field_validator("name")
    @classmethod
    def _lower(cls, value: str) -> str:
        return value.lower()

    @field_validator("version")
    @classmethod
    def _valid_spec(cls, value: str) -> str:
        parse_version_spec(value)
        return value

    @field_validator("extras")
    @classmethod
    def _valid_extras(cls, value: dict[str, str]) -> dict[str, str]:
        for spec in value.values():
            parse_version_spec(spec)
        return {k.lower(): v for k, v in value.items()}

    @cached_property
    def cache_key(self) -> str:
        """A stable text form, for memoising compatibility verdicts."""
        return self.model_dump_json()


class DeviceRequest(SpecModel):
    """Devices each worker needs. `models` narrows the class to catalog ids."""

    device_class: DeviceClass = Field(alias="class")
    count: bounded(gt=0, le=MAX_DEVICES_PER_WORKER) = Field(default=1, description="whole devices; a fraction < 1 on shareable pools")
    models: list[Name] = []
    min_memory_gb: DeviceMemoryGB = 0
    memory_gb: bounded(gt=0, le=MAX_DEVICE_MEMORY_GB) | None = Field(
        default=None, description="a slice of one device's memory (HAMi gpumem); shareable pools only"
    )
    cores_percent: bounded(gt=0, le=100) | None = Field(default=None, description="share of one device's compute (HAMi gpucores)")
    mix_models: bool = Field(
        default=False,
        description="let one gang span several device models (e.g. H800 and A100 workers); off: all workers on one model",
    )

    @field_validator("count")
    @classmethod
    def _whole_or_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError("count above 1 must be a whole number")
        return value


class TopologyRequest(SpecModel):
    """Where workers and devices must sit relative to each other."""

    same: Literal["none", "node", "network_group", "zone"] = Field(default="none", description="all workers on one node / network group / zone")
    device_island: bool = Field(default=False, description="each worker's devices within one NVLink / HCCS island")


class WorkerDemand(SpecModel):
    devices: DeviceRequest | None = None
    cpu: Cores = 1
    memory_gb: MemoryGB = 1


class DataLocation(SpecModel):
    zone: ShortText = ""
    path: Text = ""


# TaskSpec's cached properties (derived from its fields; dropped by TaskSpec.copy_with).
_CACHED_ON_TASK = ("runtime_estimate_s", "placement_shape")


class TaskSpec(ObjectSpec):
    kind: Literal["Task"] = "Task"
    name: Name
    tenant: str
    env: Environment = Environment.DEV
    task_type: TaskType = Field(default=TaskType.GENERAL, alias="type")
    template: Name | None = None
    goal: Goal | None = Field(default=None, description="what the task is for (model, method, targets); sizes a task that names no devices")
    framework: FrameworkRequest | None = None
    workers: int = Field(default=1, ge=1, le=MAX_WORKERS)
    per_worker: WorkerDemand = WorkerDemand()
    features: ShortTexts = Field(default=[], description="required device features, e.g. bf16, fp8")
    fallback: list[Name] = Field(default=[], description="ordered device models or pools")
    any_of: list[Name] = Field(default=[], description="a set of device models or pools")
    image: Text = ""
    command: Command = Field(default="", description="run with sh -c; at most 64 KiB of UTF-8")
    env_vars: EnvVars = Field(default={}, description="at most 64 variables, each value at most 16 KiB")
    priority: Priority = Priority.NORMAL
    data: DataLocation | None = None
    runtime_estimate: Duration | None = Field(default=None, description="on the reference device: '6h', '90m'; at most 366d")
    max_runtime: Duration | None = Field(default=None, description="at most 366d")
    queue: Name | None = Field(default=None, description="named queue; default: the first queue that accepts the task type")
    topology: TopologyRequest | None = None
    exclude_nodes: list[Name] = []
    preemptible: bool = Field(default=True, description="may be evicted by higher-priority work")
    checkpoint: CheckpointSpec | None = Field(
        default=None, description="stop gracefully (signal, grace) when evicted and requeue as a resume; see core/checkpoint.py"
    )
    relative_performance: dict[Name, PerfFactor] = Field(
        default={}, description="this task's own speed per device model (reference device = 1.0); overrides the catalog"
    )

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        return validate_tenant_path(value)

    @field_validator("features")
    @classmethod
    def _lower_features(cls, value: list[str]) -> list[str]:
        return sorted({f.strip().lower() for f in value if f.strip()})

    @field_validator("relative_performance")
    @classmethod
    def _positive_perf(cls, value: dict[str, float]) -> dict[str, float]:
        for model, factor in value.items():
            if factor <= 0:
                raise ValueError(f"relative_performance[{model}] must be > 0")
        return value

    @model_validator(mode="after")
    def _candidates(self) -> TaskSpec:
        if self.fallback and self.any_of:
            raise ValueError("set either 'fallback' (ordered) or 'any_of' (a set), not both")
        candidates = self.fallback or self.any_of
        if len(candidates) != len(set(candidates)):
            raise ValueError("fallback/any_of: a device model or pool is listed twice")
        if candidates and self.per_worker.devices is None:
            raise ValueError("fallback/any_of need per_worker.devices (which devices to substitute)")
        devices = self.per_worker.devices
        if devices is not None and (devices.memory_gb or devices.cores_percent) and devices.count != 1:
            raise ValueError("per_worker.devices: memory_gb / cores_percent ask for a slice of one device; leave count at 1")
        return self

    @cached_property
    def runtime_estimate_s(self) -> float | None:
        # Cached: the scheduler asks for it many times per cycle.
        return parse_duration(self.runtime_estimate) if self.runtime_estimate else None

    def with_runtime_estimate(self, text: str | None) -> TaskSpec:
        """A copy with another runtime estimate."""
        return self.copy_with(runtime_estimate=text)

    def copy_with(self, **update) -> TaskSpec:
        """A copy with `update` applied and the cached derived values dropped. pydantic's
        model_copy copies the instance dict, cached properties included: a copy with another
        fallback list kept the original's `placement_shape`, so a memo keyed by the shape
        answered for the original (the `placement_shape` of preferred_only's copy did)."""
        copy = self.model_copy(update=update)
        for name in _CACHED_ON_TASK:
            vars(copy).pop(name, None)
        return copy

    @cached_property
    def placement_shape(self) -> str:
        """Everything that decides where this task can go, as one string (name, command,
        tenant, runtime and other run-time details left out). Equal shapes fit or fail together."""
        exclude = {
            "name",
            "tenant",
            "command",
            "env_vars",
            "labels",
            "description",
            "max_runtime",
            "template",
            "image",
            "kind",
            "runtime_estimate",
            "data",
            "goal",
            "checkpoint",
        }
        return f"{bool(self.image)}|{self.model_dump_json(exclude=exclude)}"

    @property
    def candidates(self) -> list[str]:
        return self.fallback or self.any_of

    @property
    def ordered(self) -> bool:
        return bool(self.fallback)


_NOT_SHAPE = {
    *("name", "tenant", "command", "env_vars", "labels", "description"),
    *("max_runtime", "template", "image", "kind", "runtime_estimate", "data", "goal", "checkpoint"),
}


class TaskDefaults(SpecModel):
    """Fields a template may preset; a task's own values win."""

    goal: GoalFields | None = Field(default=None, description="goal defaults, e.g. method and precision; the task names the model")
    framework: FrameworkRequest | None = None
    workers: int | None = Field(default=None, ge=1, le=MAX_WORKERS)
    per_worker: WorkerDemand | None = None
    features: ShortTexts | None = None
    fallback: list[Name] | None = None
    any_of: list[Name] | None = None
    image: Text | None = None
    command: Command | None = None
    env_vars: EnvVars | None = None
    priority: Priority | None = None
    runtime_estimate: Duration | None = None
    max_runtime: Duration | None = None
    queue: Name | None = None
    topology: TopologyRequest | None = None
    preemptible: bool | None = None
    checkpoint: CheckpointSpec | None = None


class TaskTemplateSpec(ObjectSpec):
    kind: Literal["TaskTemplate"] = "TaskTemplate"
    name: Name
    task_type: TaskType = Field(alias="type")
    display_name: ShortText = ""
    defaults: TaskDefaults = TaskDefaults()


def apply_template(task_fields: dict[str, Any], template: TaskTemplateSpec) -> dict[str, Any]:
    """Raw task fields with the template's defaults filled in (the task's values win).

    Works on the raw mapping so that "not given" and "given the default" stay distinct.
    """
    merged = dict(task_fields)
    merged.setdefault("type", template.task_type.value)
    defaults = template.defaults.model_dump(by_alias=True, exclude_none=True, mode="json")
    for key, value in defaults.items():
        if key == "goal" and not isinstance(merged.get("goal"), dict):
            continue  # a template's goal defaults complete a task's goal; a task without one keeps its devices
        if key not in merged:
            merged[key] = value
        elif key == "per_worker" and isinstance(merged[key], dict):
            merged[key] = {**value, **merged[key]}
        elif key in ("env_vars", "goal") and isinstance(merged[key], dict):
            merged[key] = {**value, **merged[key]}
    return merged
