"""Inventory specs: device models, clusters, nodes and pools.

A *pool* is a set of identical devices with the same software stack on a set of nodes:
the unit that quotas, reservations and fallback lists refer to.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator, model_validator

from hetpool.core.base import ConfigMap, Labels, Name, ObjectSpec, ShortText, ShortTexts, SpecModel
from hetpool.core.limits import (
    MAX_CPU_CORES,
    MAX_DEVICE_FIGURE,
    MAX_DEVICES_PER_NODE,
    DeviceFigure,
    DeviceMemoryGB,
    IslandId,
    MemoryGB,
    PerfFactor,
    Price,
)


class DeviceClass(StrEnum):
    CPU = "cpu"
    GPU = "gpu"
    NPU = "npu"
    DPU = "dpu"


class Vendor(StrEnum):
    NVIDIA = "nvidia"
    AMD = "amd"
    HUAWEI = "huawei"
    CAMBRICON = "cambricon"
    HYGON = "hygon"
    KUNLUNXIN = "kunlunxin"
    INTEL = "intel"
    ARM = "arm"
    GENERIC = "generic"


class RuntimeName(StrEnum):
    """Device runtime a software stack is built against."""

    CUDA = "cuda"
    CANN = "cann"
    ROCM = "rocm"
    DTK = "dtk"  # Hygon's ROCm-derived toolkit
    NEUWARE = "neuware"  # Cambricon
    XRE = "xre"  # Kunlunxin runtime
    DOCA = "doca"  # BlueField DPUs
    NONE = "none"  # plain CPUs


class TaskType(StrEnum):
    TRAINING = "training"
    INFERENCE = "inference"
    BATCH_INFERENCE = "batch-inference"
    PREPROCESSING = "preprocessing"
    OFFLOAD = "offload"
    GENERAL = "general"


class BackendKind(StrEnum):
    LOCAL = "local"
    SLURM = "slurm"
    KUBERNETES = "kubernetes"
    RAY = "ray"


class DeviceModelSpec(ObjectSpec):
    """A catalog entry: what one device of this model is and can do."""

    kind: Literal["DeviceModel"] = "DeviceModel"
    name: Name
    vendor: Vendor
    device_class: DeviceClass = Field(alias="class")
    display_name: ShortText
    architecture: ShortText = ""
    generation: ShortText = Field(
        default="", description="the device generation the compatibility tables key on: sm_90, gfx942, ascend910b, mlu370, kunlun3 …"
    )
    memory_gb: DeviceMemoryGB
    memory_bandwidth_gbps: DeviceFigure | None = None
    fp16_tflops: DeviceFigure | None = Field(default=None, description="dense FP16 tensor TFLOPS")
    bf16_tflops: DeviceFigure | None = Field(default=None, description="dense BF16 tensor TFLOPS")
    int8_tops: DeviceFigure | None = None
    cores: int | None = Field(default=None, ge=0, le=MAX_DEVICE_FIGURE, description="CPU cores / AI cores / SMs")
    interconnect: ShortText = ""
    features: ShortTexts = []
    runtime: RuntimeName = RuntimeName.NONE
    k8s_resource: ShortText = ""
    visible_devices_env: ShortText = ""
    slurm_gres: ShortText = ""
    pci_ids: ShortTexts = []
    aliases: ShortTexts = Field(default=[], description="names discovery tools print")
    relative_performance: dict[TaskType, PerfFactor] = Field(
        default={}, description="throughput relative to the reference device (1.0) per task type"
    )
    verified: bool = Field(default=True, description="False when figures are unverified defaults")
    sources: ShortTexts = Field(default=[], description="where the figures and features come from (document @ version, checked date)")

    @field_validator("features")
    @classmethod
    def _lower_features(cls, value: list[str]) -> list[str]:
        return sorted({f.strip().lower() for f in value if f.strip()})

    @field_validator("relative_performance")
    @classmethod
    def _positive_perf(cls, value: dict[TaskType, float]) -> dict[TaskType, float]:
        for task_type, factor in value.items():
            if factor <= 0:
                raise ValueError(f"relative_performance[{task_type}] must be > 0")
        return value

    def perf_for(self, task_type: TaskType) -> float:
        """Relative throughput for `task_type`, falling back to 'general', then 1.0."""
        return self.relative_performance.get(task_type, self.relative_performance.get(TaskType.GENERAL, 1.0))


class ClusterSpec(ObjectSpec):
    kind: Literal["Cluster"] = "Cluster"
    name: Name
    backend: BackendKind = BackendKind.LOCAL
    zone: Name = "default"
    region: ShortText = ""
    owner: ShortText = Field(default="", description="who answers for it (a team, a tenant or a person): shown in its profile")
    backend_config: ConfigMap = Field(default={}, description="backend connection settings (opaque to the scheduler)")


class RuntimeVersion(SpecModel):
    name: RuntimeName
    version: ShortText = Field(min_length=1)


class SoftwareStack(SpecModel):
    """What is installed on a node: driver, device runtime and frameworks."""

    driver: ShortText = ""
    runtime: RuntimeVersion | None = None
    frameworks: Labels = Field(default={}, description="framework name -> installed version")
    os: ShortText = ""
    python: ShortText = ""

    @field_validator("frameworks")
    @classmethod
    def _lower_framework_names(cls, value: dict[str, str]) -> dict[str, str]:
        return {k.strip().lower(): str(v).strip() for k, v in value.items()}


class DeviceGroup(SpecModel):
    """`count` devices of one catalog model on a node."""

    model: Name
    count: int = Field(ge=1, le=MAX_DEVICES_PER_NODE)
    # Island ids per device for topology (NVLink / HCCS); empty: one island.
    islands: list[IslandId] = []


class NodeSpec(ObjectSpec):
    kind: Literal["Node"] = "Node"
    name: Name
    cluster: Name
    zone: Name | None = Field(default=None, description="defaults to the cluster's zone")
    network_group: ShortText = ""
    owner: ShortText = Field(default="", description="who answers for it (a team, a tenant or a person): shown in its profile")
    arch: Literal["x86_64", "aarch64"] = "x86_64"
    cpu_cores: int = Field(ge=1, le=MAX_CPU_CORES)
    memory_gb: MemoryGB
    devices: list[DeviceGroup] = []
    stack: SoftwareStack | None = None
    schedulable: bool = True
    # The one agent user that may register and heartbeat this node; None: the operator's
    # (or a connector's) alone. Set by the server when an agent registers a new node.
    agent: str | None = Field(default=None, min_length=1, max_length=64, description="the agent user that reports for this node")

    @model_validator(mode="after")
    def _unique_models(self) -> NodeSpec:
        models = [g.model for g in self.devices]
        if len(models) != len(set(models)):
            raise ValueError("devices: each model may appear once per node (sum the counts)")
        return self


class Reservation(SpecModel):
    tenants: ShortTexts = Field(default=[], description="tenant paths (a subtree) that may use it")
    min_priority: ShortText | None = Field(default=None, description="priority class at or above which any tenant may use it")


class PoolSpec(ObjectSpec):
    kind: Literal["Pool"] = "Pool"
    name: Name
    cluster: Name
    model: Name
    nodes: list[Name] = Field(min_length=1)
    owner: ShortText = Field(default="", description="who answers for it (a team, a tenant or a person): shown in its profile")
    stack: SoftwareStack | None = Field(default=None, description="default stack for nodes that do not declare one")
    price_per_hour: Price = Field(default=0.0, description="per device per hour, at most 1,000,000")
    reserved_for: Reservation | None = None
    shareable: bool = False
    agents: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] = Field(
        default=[],
        max_length=1000,
        description="agent users that may add their own nodes to this pool",
    )

    @field_validator("nodes")
    @classmethod
    def _unique_nodes(cls, value: list[str]) -> list[str]:
        if len(value) != len(set(value)):
            raise ValueError("nodes: a node is listed twice")
        return value
