"""Tasks: plan, submit, list, read, cancel, logs."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Body, Depends, Header, Query, Response

from hetpool.core.states import TaskState
from hetpool.core.tenancy import validate_tenant_path
from hetpool.server.deps import get_ctx, get_principal
from hetpool.server.routers.params import Offset
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.schemas.tasks import LogsResponse, PlanResponse, RecommendResponse, TaskResponse
from hetpool.server.services import access, idempotency, submit_batch, task_lifecycle, task_views
from hetpool.server.services import recommend as recommend_service
from hetpool.server.services import tasks as task_service
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1/tasks", tags=["tasks"], responses=ERROR_RESPONSES)
# Keys that apply only to some tasks (pending, approval) or only to the detail view are
# left out rather than sent as null: response_model_exclude_unset keeps the body as built.
_TASK = {"response_model": TaskResponse, "response_model_exclude_unset": True}

TASK_EXAMPLE = {
    "name": "llama3-8b-sft",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.3,<2.6"},
    "workers": 2,
    "per_worker": {"devices": {"class": "gpu", "count": 8, "min_memory_gb": 80}, "cpu": 16, "memory_gb": 64},
    "command": "torchrun train.py",
}

GOAL_EXAMPLE = {
    "name": "sft-8b",
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "framework": {"name": "pytorch", "version": ">=2.4"},
    "goal": {"model": "llama3.1-8b", "method": "lora", "precision": "bf16", "seq_len": 4096, "tokens": 2e9, "deadline": "48h", "max_cost": 2000},
    "command": "torchrun train.py",
}


def _strip_kind(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k != "kind"}


def doc_tenant(doc: Any) -> str | None:
    """The tenant a task document names, normalised as the spec will be; None when it is
    missing or malformed (the spec check then reports it)."""
    tenant = doc.get("tenant") if isinstance(doc, dict) else None
    try:
        return validate_tenant_path(tenant) if isinstance(tenant, str) else None
    except ValueError:
        return None


def _visible_row(session, user: Principal, task_id: str, action: str):
    """The task if the user may do `action` on it; 404 if it may not even read it."""
    row = task_lifecycle.get_row(session, task_id)
    access.require_visible(user, action, row.tenant, f"task {task_id!r}")
    return row


@router.post(
    "/plan",
    response_model=PlanResponse,
    response_model_exclude_unset=True,
    summary="Where the task would run now, fallback and reasons; commits nothing",
)
def plan(
    doc: dict[str, Any] = Body(..., examples=[TASK_EXAMPLE]),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    access.require(user, "task.submit", doc_tenant(doc))
    with ctx.db.transaction() as session:
        return task_service.plan(ctx, session, _strip_kind(doc))


@router.post(
    "/recommend",
    response_model=RecommendResponse,
    summary="Ranked ways to run a task's goal (device model × count × pool), with start, completion, cost and targets met",
)
def recommend(
    doc: dict[str, Any] = Body(..., examples=[GOAL_EXAMPLE]),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    access.require(user, "task.submit", doc_tenant(doc))
    with ctx.db.transaction() as session:
        return recommend_service.recommend(ctx, session, _strip_kind(doc), task_service.planner())


@router.post(
    "",
    status_code=201,
    **_TASK,
    summary="Submit a task",
    description="With an Idempotency-Key header, a retry with the same key and body returns the first task "
    "(status 200, header Idempotent-Replayed: true) instead of creating another; the same key with another body is a 409.",
)
async def submit(
    response: Response,
    doc: dict[str, Any] = Body(..., examples=[TASK_EXAMPLE]),
    idempotency_key: str | None = Header(default=None, alias="Idempotency-Key"),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    access.require(user, "task.submit", doc_tenant(doc))
    # Group commit: this request's task shares a transaction with the submits that arrive with it.
    # Awaited, not run in a thread: the route holds no thread of the pool while its batch commits.
    body, replayed = await submit_batch.submitter(ctx).submit_async(_strip_kind(doc), user_id=user.user_id, actor=user.name, key=idempotency_key)
    if replayed:
        response.status_code = 200
        response.headers[idempotency.REPLAYED_HEADER] = "true"
    return body


@router.get("", response_model=list[TaskResponse], response_model_exclude_unset=True, summary="List tasks, newest first")
def list_tasks(
    state: TaskState | None = Query(default=None),
    tenant: str | None = Query(default=None, max_length=200),
    limit: int = Query(default=200, ge=1, le=1000),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> list[dict]:
    access.require(user, "task.read")
    scopes = access.visible_tenants(user)  # other teams' tasks are not listed
    with ctx.db.transaction() as session:
        rows = task_views.list_tasks(session, state=state.value if state else None, tenant=tenant, limit=limit, scopes=scopes)
        return [task_views.task_response(session, r, ctx=ctx) for r in rows]


@router.get("/{task_id}", **_TASK, summary="A task with its placement, explanation and timeline")
def get_task(task_id: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        return task_views.task_response(session, _visible_row(session, user, task_id, "task.read"), detail=True, ctx=ctx)


@router.post("/{task_id}/cancel", **_TASK, summary="Cancel a task (running work is stopped on its backend)")
def cancel(task_id: str, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    with ctx.db.transaction() as session:
        _visible_row(session, user, task_id, "task.cancel")
        row = task_lifecycle.cancel(ctx, session, task_id, user.name)
        return task_views.task_response(session, row, ctx=ctx)


@router.get("/{task_id}/logs", response_model=LogsResponse, summary="Output of one worker, from a byte offset")
def logs(
    task_id: str,
    rank: int = Query(default=0, ge=0, le=1023),
    offset: Offset = 0,
    limit: int = Query(default=65536, ge=1, le=1048576),
    ctx: ServiceContext = Depends(get_ctx),
    user: Principal = Depends(get_principal),
) -> dict:
    with ctx.db.transaction() as session:
        _visible_row(session, user, task_id, "task.logs")
        read = task_views.prepare_logs(ctx, session, task_id, rank=rank)
    return read.fetch(offset=offset, limit=limit)  # the engine is asked with no transaction open
