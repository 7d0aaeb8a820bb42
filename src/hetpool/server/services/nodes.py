"""Host agents: registration, heartbeats, liveness. Offline nodes and abnormal devices
are kept out of scheduling (see cluster_state)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.errors import NotFoundError, SpecError
from hetpool.core.specs import parse_spec, spec_to_document
from hetpool.server.db.models import InventoryObjectRow, NodeStatusRow
from hetpool.server.services import agent_nodes, audit
from hetpool.server.services.agent_nodes import AGENT_SOURCE as AGENT
from hetpool.server.services.auth import Principal
from hetpool.server.services.auto_pools import AUTO_POOL_LABEL, ensure_in_pool, stage_pool
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import apply_specs, delete_object, load_inventory

READY, OFFLINE = "ready", "offline"
HEALTH_VALUES = ("ok", "warning", "abnormal", "unknown")


def register(
    ctx: ServiceContext, session: Session, node_doc: dict, pool: str | None, caller: Principal, agent_version: str, models: list[dict] = ()
) -> dict:
    """Create or update the agent's Node (and add it to `pool`), then record it as ready.

    An agent registers only its own nodes (agent_nodes: a new name becomes its own; an
    operator's, another agent's or a connector's node raises NodeNotOwnedError) and joins
    an operator's pool only when the pool names it.

    `models` registers devices the catalog does not know as placeholder DeviceModels, so
    they are shown and counted rather than dropped. An agent may only add `unknown-…`
    models: it must not redefine a catalog entry.
    """
    actor = caller.name
    spec = agent_nodes.claim(caller, parse_spec({**node_doc, "kind": "Node"}, "node"))
    refused = agent_nodes.refusal(session, caller, spec.name)
    if refused is not None:
        raise refused.error()
    placeholders = []
    known = load_inventory(ctx, session).catalog if models else None
    for i, doc in enumerate(models):
        name = str(doc.get("name", ""))
        if not name.startswith("unknown-"):
            raise SpecError(f"models[{i}].name: an agent may only register unknown-… models, got {name!r}")
        placeholder = parse_spec({**doc, "kind": "DeviceModel", "verified": False}, f"models[{i}]")
        if name not in known:  # never overwrite a model an operator has since described properly
            placeholders.append(placeholder)
    specs: list = [*placeholders, spec]
    inv = load_inventory(ctx, session)
    for model in placeholders:
        inv.add(model)
    inv.nodes[spec.name] = spec
    cluster = inv.clusters.get(spec.cluster)
    if pool:
        existing = inv.pools.get(pool)
        if existing is None:
            raise SpecError(f"pool: unknown pool {pool!r}; known: {', '.join(sorted(inv.pools)) or 'none'}")
        agent_nodes.check_pool(caller, existing, spec.name)
        # Named explicitly: the node leaves the automatic pool it may have joined before.
        for other in list(inv.pools.values()):
            if other.labels.get(AUTO_POOL_LABEL) == "true" and other.model == existing.model and spec.name in other.nodes:
                rest = [n for n in other.nodes if n != spec.name]
                stage_pool(inv, specs, other.model_copy(update={"nodes": rest}), drop=not rest)
        if spec.name not in existing.nodes:
            stage_pool(inv, specs, existing.model_copy(update={"nodes": [*existing.nodes, spec.name]}))
    elif cluster is not None:
        for group in spec.devices:  # pools formed automatically from identical devices and stacks
            ensure_in_pool(inv, specs, cluster, spec, group.model, "agent")
    for name in [s for s in specs if isinstance(s, str)]:
        delete_object(ctx, session, "Pool", name, actor)
    results = apply_specs(ctx, session, [s for s in specs if not isinstance(s, str)], actor)
    heartbeat(ctx, session, spec.name, [], caller, agent_version)
    return {"node": spec_to_document(spec), "results": results}


def heartbeat(ctx: ServiceContext, session: Session, node: str, devices: list[dict], caller: Principal, agent_version: str) -> NodeStatusRow:
    actor = caller.name
    exists = session.execute(select(InventoryObjectRow.id).where(InventoryObjectRow.kind == "Node", InventoryObjectRow.name == node)).scalar()
    if exists is None:
        raise NotFoundError(f"node {node!r} is not registered; run the agent's registration first")
    refused = agent_nodes.refusal(session, caller, node)
    if refused is not None:
        raise refused.error()
    for i, device in enumerate(devices):
        if device.get("health", "ok") not in HEALTH_VALUES:
            raise SpecError(f"devices[{i}].health: must be one of {', '.join(HEALTH_VALUES)}")
    now = ctx.clock.now()
    row = session.get(NodeStatusRow, node)
    before = None if row is None else {"state": row.state, "abnormal": _abnormal(row.devices)}
    if row is None:
        row = NodeStatusRow(node=node, state=READY, last_heartbeat_at=now, agent_version=agent_version, devices=devices)
        session.add(row)
    elif row.source != AGENT:
        # A connector (Slurm, Kubernetes, Ray) owns this node's state; an agent on it adds device health.
        before["state"] = row.state
        row.last_heartbeat_at, row.agent_version, row.devices = now, agent_version, devices
    else:
        row.state, row.last_heartbeat_at, row.agent_version, row.devices = READY, now, agent_version, devices
    after = {"state": row.state, "abnormal": _abnormal(devices)}
    if before != after:  # audit changes of liveness or health, not every heartbeat
        audit.record(session, actor=actor, action="node.status", object_kind="Node", object_id=node, before=before, after=after, ts=now)
    return row


def _abnormal(devices: list[dict]) -> list[int]:
    return sorted(int(d["index"]) for d in devices if d.get("health") == "abnormal")


def mark_offline(ctx: ServiceContext) -> list[str]:
    """Nodes whose agent missed its heartbeats become offline (audited)."""
    now = ctx.clock.now()
    cutoff = now - timedelta(seconds=ctx.settings.heartbeat_timeout_s)
    changed = []
    with ctx.db.transaction() as session:
        for row in session.execute(select(NodeStatusRow).where(NodeStatusRow.state == READY, NodeStatusRow.source == AGENT)).scalars():
            if row.last_heartbeat_at < cutoff:
                row.state = OFFLINE
                changed.append(row.node)
                audit.record(
                    session,
                    actor="monitor",
                    action="node.status",
                    object_kind="Node",
                    object_id=row.node,
                    before={"state": READY},
                    after={"state": OFFLINE},
                    ts=now,
                )
    return changed


def health_view(session: Session) -> tuple[set[str], dict[str, set[int]], dict[str, dict[str, int]]]:
    """(nodes that must not receive work, abnormal device indices per node, devices in use
    by each engine's own workloads per node and model) for the scheduler."""
    unschedulable, broken, used = set(), {}, {}
    for row in session.execute(select(NodeStatusRow)).scalars():
        if row.state != READY:  # offline, draining, drained, down, unknown
            unschedulable.add(row.node)
        bad = set(_abnormal(row.devices))
        if bad:
            broken[row.node] = bad
        if row.used:
            used[row.node] = {m: int(c) for m, c in row.used.items() if int(c) > 0}
    return unschedulable, broken, used


def status_list(session: Session) -> list[dict]:
    return [
        {
            "node": r.node,
            "state": r.state,
            "last_heartbeat_at": r.last_heartbeat_at.isoformat(),
            "agent_version": r.agent_version,
            "devices": r.devices,
            "source": r.source,
            "reason": r.reason,
            "used": r.used or {},
            "labels": r.labels or {},
            "taints": r.taints or [],
            "partitions": r.partitions or [],
        }
        for r in session.execute(select(NodeStatusRow).order_by(NodeStatusRow.node)).scalars()
    ]


def engine_busy(engine_used: dict[str, dict[str, int]], held: Iterable, pools: dict) -> dict[str, dict[str, int]]:
    """Devices an engine reports in use that hetpool did not place there itself (a Slurm
    node's GresUsed counts hetpool's own jobs too, once it dispatches to Slurm)."""
    if not engine_used:
        return {}
    ours: dict[tuple[str, str], int] = {}
    for a in held:
        pool = pools.get(a.pool)
        if pool is not None and a.node in engine_used:
            ours[(a.node, pool.model)] = ours.get((a.node, pool.model), 0) + len(a.device_indices)
    out = {}
    for node, per_model in engine_used.items():
        busy = {m: c - ours.get((node, m), 0) for m, c in per_model.items() if c - ours.get((node, m), 0) > 0}
        if busy:
            out[node] = busy
    return out
