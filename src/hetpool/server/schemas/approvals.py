"""Bodies of approval requests: decide one, read one, the inbox view."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from hetpool.server.schemas.common import ApiModel, Document, RequestModel


class ApproveRequest(RequestModel):
    comment: str = Field(default="", max_length=2000)


class RejectRequest(RequestModel):
    comment: str = Field(min_length=1, max_length=2000, description="why: the submitter sees it on the cancelled task")


class ApprovalResponse(ApiModel):
    id: str
    kind: str = Field(description="task, quota, …: what is held")
    operation: str = Field(description="apply or delete")
    state: str = Field(description="pending, approved, rejected, expired or withdrawn")
    tenant: str | None
    task_id: str | None
    document: Document | None = Field(description="the held change or delete")
    reasons: list[dict[str, Any]] | None = Field(description="why approval is needed (rule, facts)")
    reason: str | None
    policies: list[str] | None
    approvers: list[Any] | None
    requested_by: str
    created_at: str | None
    expire_after: str | None
    expires_at: str | None
    decided_by: str | None
    decided_at: str | None
    comment: str | None


class TaskApproval(ApiModel):
    """The open request of a task awaiting approval (on the task)."""

    id: str
    reasons: list[dict[str, Any]] | None
    expires_at: str | None
    approvers: list[Any] | None


class ApprovalPlan(ApiModel):
    """Whether a task would need approval (on a plan)."""

    needed: bool
    reasons: list[dict[str, Any]]
    expire_after: str | None


class InboxItem(ApprovalResponse):
    age_s: int
    expires_in_s: int
    may_decide: bool = Field(description="pending, not expired, and the caller may decide it")
    requested: dict[str, Any] | None = Field(description="what it asks for: the task's resources, the quota's limits or what a delete removes")
    estimate: dict[str, Any] | None = Field(description="open task requests: where it would run and what it would cost")


class ApprovalInbox(ApiModel):
    now: str
    requests: list[InboxItem]
