"""Host agents: register a node, send heartbeats; everyone can read node status. An agent
token reports only for its own nodes (services/agent_nodes.py); refusals are audited."""

from __future__ import annotations

from fastapi import APIRouter, Depends

from hetpool.core.errors import PermissionDeniedError
from hetpool.server.deps import FailureLimiter, get_ctx, get_principal
from hetpool.server.schemas.agent import HeartbeatRequest, HeartbeatResponse, NodeStatus, RegisterRequest, RegisterResponse
from hetpool.server.schemas.common import ERROR_RESPONSES
from hetpool.server.services import access, audit
from hetpool.server.services import nodes as node_service
from hetpool.server.services.agent_nodes import NodeNotOwnedError, PoolNotOpenError
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext

router = APIRouter(prefix="/api/v1", tags=["agent"], responses=ERROR_RESPONSES)


# Refusals are audited, at most 20 a minute per agent and node (the rest are counted into
# the next event), so a stolen token hammering someone's node cannot flood the chain.
_refusals = FailureLimiter(burst=20, window_s=60.0)


def _audit_refusal(ctx: ServiceContext, user: Principal, call: str, node: str, exc: PermissionDeniedError) -> None:
    suppressed = _refusals.admit((user.name, node))
    if suppressed is None:
        return
    after = {"call": call, "code": exc.code, **{d["loc"]: d["msg"] for d in exc.details}}
    if suppressed:
        after["suppressed"] = suppressed
    # Its own transaction: the request's is rolled back with the refusal.
    with ctx.db.transaction() as session:
        audit.record(session, actor=user.name, action="agent.refused", object_kind="Node", object_id=node, after=after, ts=ctx.clock.now())


@router.post(
    "/agent/register",
    response_model=RegisterResponse,
    response_model_exclude_unset=True,  # a result without an id has no id key
    summary="Create or update the agent's own node (and join a pool that admits the agent)",
)
def register(body: RegisterRequest, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "node.report")  # the agent role (or platform-admin): an agent token can do nothing else
    try:
        with ctx.db.transaction() as session:
            return node_service.register(ctx, session, body.node, body.pool, user, body.agent_version, body.models)
    except (NodeNotOwnedError, PoolNotOpenError) as exc:
        _audit_refusal(ctx, user, "register", str(body.node.get("name", ""))[:200], exc)
        raise


@router.post("/agent/heartbeat", response_model=HeartbeatResponse, summary="Liveness and per-device health and use of the agent's own node")
def heartbeat(body: HeartbeatRequest, ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> dict:
    access.require(user, "node.report")
    try:
        with ctx.db.transaction() as session:
            row = node_service.heartbeat(ctx, session, body.node, [d.model_dump() for d in body.devices], user, body.agent_version)
            return {"node": row.node, "state": row.state}
    except NodeNotOwnedError as exc:
        _audit_refusal(ctx, user, "heartbeat", body.node, exc)
        raise


@router.get("/nodes/status", response_model=list[NodeStatus], summary="Liveness and device health of every node with an agent")
def status(ctx: ServiceContext = Depends(get_ctx), user: Principal = Depends(get_principal)) -> list[dict]:
    access.require(user, "inventory.read")
    with ctx.db.transaction() as session:
        return node_service.status_list(session)
