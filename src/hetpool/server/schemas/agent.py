"""Bodies of the host agents' calls (register, heartbeat) and of GET /nodes/status."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from hetpool.core.limits import MAX_DEVICE_MEMORY_GB, MAX_DEVICES_PER_NODE
from hetpool.server.schemas.common import ApiModel, Document, RequestModel
from hetpool.server.schemas.inventory import ApplyResult


class RegisterRequest(RequestModel):
    node: dict[str, Any] = Field(description="a Node spec (kind may be omitted)")
    pool: str | None = Field(default=None, max_length=200, description="add the node to this existing pool")
    agent_version: str = Field(default="", max_length=32)
    models: list[dict[str, Any]] = Field(
        default=[], max_length=64, description="DeviceModel documents for devices the catalog does not know (names start with unknown-)"
    )


class DeviceReport(RequestModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    index: int = Field(ge=0, lt=MAX_DEVICES_PER_NODE)
    model: str = Field(default="", max_length=200)
    health: str = Field(default="ok", max_length=32)
    utilisation_pct: float | None = Field(default=None, ge=0, le=100)
    memory_used_mib: int | None = Field(default=None, ge=0, le=MAX_DEVICE_MEMORY_GB * 1024)


class HeartbeatRequest(RequestModel):
    node: str = Field(min_length=1, max_length=200)
    devices: list[DeviceReport] = Field(default=[], max_length=1024)
    agent_version: str = Field(default="", max_length=32)


class RegisterResponse(ApiModel):
    node: Document = Field(description="the Node as stored")
    results: list[ApplyResult] = Field(description="what registering created or changed (the node, its pools, placeholder models)")


class HeartbeatResponse(ApiModel):
    node: str
    state: str = Field(description="the node's state after the heartbeat")


class NodeStatus(ApiModel):
    node: str
    state: str
    last_heartbeat_at: str
    agent_version: str | None
    devices: list[dict[str, Any]] | None = Field(description="per device: index, model, health, utilisation, memory used")
    source: str | None = Field(description="agent, or the connector that reported the node")
    reason: str | None
    used: dict[str, Any]
    labels: dict[str, Any]
    taints: list[Any]
    partitions: list[Any]
