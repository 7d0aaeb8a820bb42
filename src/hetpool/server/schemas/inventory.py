"""Bodies of applying, reading and deleting objects, and of a pool's capability profile.
Specs themselves are validated by the domain models (core/); here they are documents."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from hetpool.server.schemas.common import ApiModel, Document, Number, RequestModel


class ApplyRequest(RequestModel):
    documents: list[dict[str, Any]] = Field(min_length=1, max_length=5000, description="objects with kind: and name:")
    sources: list[str] | None = Field(default=None, description="where each document came from (file names), for error messages")


class ApplyResult(ApiModel):
    kind: str
    name: str
    action: str = Field(description="created | configured | unchanged | submitted | held for approval")
    id: str | None = Field(default=None, description="the task's id (submitted) or the approval request's (held for approval)")


class ApplyResponse(ApiModel):
    results: list[ApplyResult]


class TaskSubmitRequest(BaseModel):
    """A Task document (kind: Task may be omitted)."""

    model_config = ConfigDict(extra="allow")


class HeldChange(ApiModel):
    """A delete an approval policy holds (202): the approval request to follow."""

    kind: str
    name: str
    action: str = Field(description="held for approval")
    operation: str = Field(description="delete")
    id: str = Field(description="the approval request")


class PoolProfile(ApiModel):
    pool: str
    cluster: str
    labels: dict[str, str]
    profile: dict[str, Any] = Field(description="the device model: vendor, class, memory, interconnect, stack, features (and missing ones)")
    devices: dict[str, int] = Field(description="total and per status: idle, busy, abnormal, offline")
    nodes: list[dict[str, Any]] = Field(description="per node: state, reason and device counts per status")
    task_types: Any = Field(description="task types the device suits, with its relative performance")
    frameworks: Any = Field(description="frameworks and versions the installed stack runs")
    substitutes_for: Any = Field(description="models this one may stand in for")
    reserved_for: dict[str, Any] | None
    price_per_hour: Number | None
    shareable: bool


ObjectList = list[Document]
