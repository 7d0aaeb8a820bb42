"""Kept until routers/tasks.py reads routers/params.py and schemas/tasks.py (being committed); then removed."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ApplyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    documents: list[dict[str, Any]] = Field(min_length=1, max_length=5000, description="objects with kind: and name:")
    sources: list[str] | None = Field(default=None, description="where each document came from (file names), for error messages")


class ApplyResult(BaseModel):
    kind: str
    name: str
    action: str = Field(description="created | configured | unchanged | submitted")
    id: str | None = None


class ApplyResponse(BaseModel):
    results: list[ApplyResult]


class TaskSubmitRequest(BaseModel):
    """A Task document (kind: Task may be omitted)."""

    model_config = ConfigDict(extra="allow")


class ErrorBody(BaseModel):
    code: str
    message: str
    details: list[dict[str, Any]] = []


class LogsResponse(BaseModel):
    text: str
    offset: int
    complete: bool
    state: str


class AuditVerifyResponse(BaseModel):
    ok: bool
    events: int
    first_bad_event: int | None = None
    problem: str | None = None
