"""Bodies of tasks: the task as the API shows it, a plan, a log chunk."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.approvals import ApprovalPlan, TaskApproval
from hetpool.server.schemas.audit import AuditEvent
from hetpool.server.schemas.common import ApiModel, Document, Number


class PlacementView(ApiModel):
    rank: int
    node: str
    pool: str
    model: str
    devices: list[int] = Field(description="device indices on the node")
    device_fraction: Number = Field(description="share of each device (1 unless the pool is shareable)")


class TaskResponse(ApiModel):
    """A task as the API shows it. `pending` (queued: why it waits), `approval` (awaiting
    approval: the open request), `deadline` and `deadline_at_risk` (a task with a deadline)
    appear only when they apply; the detail view (GET /tasks/{id}) adds spec,
    placement_attempts, pending and events."""

    id: str
    name: str
    tenant: str
    env: str
    type: str
    template: str | None
    priority: str
    state: str
    attempt: int
    cluster: str | None
    backend: str | None
    job_id: str | None
    exit_code: int | None
    message: str | None
    fallback_used: bool | None
    created_by: str
    created_at: str | None
    admitted_at: str | None
    started_at: str | None
    finished_at: str | None
    placements: list[PlacementView]
    pending: dict[str, Any] | None = Field(default=None, description="why a queued task waits (reason code and facts)")
    approval: TaskApproval | None = Field(default=None, description="the open approval request of a task pending approval")
    deadline: str | None = Field(default=None, description="the task's deadline (goal.deadline), ISO; only when it has one")
    deadline_at_risk: bool | None = Field(
        default=None,
        description="only with a deadline: it cannot be met as things stand"
        " (queued: estimated start + runtime; placed: start + runtime; or it has passed)",
    )
    spec: Document | None = Field(default=None, description="detail view: the task as submitted")
    checkpoint: dict[str, Any] | None = Field(
        default=None,
        description="a checkpointable task: its stop signal and grace, the attempt it resumes from, the work done (progress_s, "
        "reference-device seconds) and when its current stop signal went out",
    )
    placement_attempts: list[dict[str, Any]] | None = Field(default=None, description="detail view: every placement tried and why")
    events: list[AuditEvent] | None = Field(default=None, description="detail view: the task's audit events, oldest first")


class PlanResponse(ApiModel):
    """Where the task would run now. The estimates appear when it fits an idle estate."""

    feasible: bool = Field(description="it could be placed now")
    fits_when_idle: bool
    placements: list[dict[str, Any]]
    fallback_used: bool | None
    chosen: str | None = Field(description="the device model chosen")
    reasons: dict[str, int] = Field(description="why nodes were rejected, with counts (when not feasible)")
    explanation: dict[str, Any]
    estimated_runtime_s: Number | None = None
    estimated_runtime: str | None = None
    cost_per_hour: Number | None = None
    estimated_cost: Number | None = None
    estimated_wait_s: Number | None = None
    backend: dict[str, Any] | None = None
    queue_position: int | None = None
    estimated_start: str | None = None
    estimated_pool: str | None = None
    approval: ApprovalPlan
    task: Document = Field(description="the task as it would be submitted")


class RecommendedOption(ApiModel):
    """One way to run a goal: device model × count × pool, when it would start and end,
    what it costs, which targets it meets and why; `task` submits it as an ordinary task."""

    model: str
    count: int = Field(description="devices in all")
    pool: str
    workers: int
    devices_per_worker: int
    estimated_start: str | None = Field(description="ISO time; null when the pool is busy with work of unknown length")
    estimated_completion: str | None = None
    estimated_runtime_s: Number | None = None
    estimated_runtime: str | None = None
    cost: Number | None = Field(default=None, description="estimated total, in the pools' price unit; null for a service")
    cost_per_hour: Number
    startable_now: bool
    meets: dict[str, bool] = Field(description="each target of the goal (deadline, max_cost, latency, throughput): met or not")
    reasons: list[str] = Field(description="why, in English")
    notes: list[dict[str, Any]] = Field(default=[], description="the reasons as {code, params}, for saying them in another language")
    sizing: dict[str, Any] = Field(description="memory per device (GiB), parallelism, tokens/s, latency")
    task: Document = Field(description="the task to submit for this option, with its fallback order")


class RecommendResponse(ApiModel):
    goal: dict[str, Any]
    model: dict[str, Any] = Field(description="the model sized: name, params_b, shape_from (a params-only goal's stand-in)")
    deadline: str | None = None
    options: list[RecommendedOption] = Field(description="best first: every target met, then earliest completion, then cost")
    excluded: list[dict[str, Any]] = Field(description="pools left out: {pool, model, reason, code, params}")


class LogsResponse(ApiModel):
    text: str
    offset: int = Field(description="where to read on from")
    complete: bool = Field(description="the task has ended and everything was read")
    state: str
