"""Keep clusters run by Slurm, Kubernetes or Ray in step with what their engine reports.

One sync = one `fetch()` (outside any transaction: it may take seconds) and one
reconciliation transaction that:
- creates or updates a Node per observed node (name lower-cased, `node_prefix` from the
  cluster's backend_config prepended), and a placeholder DeviceModel for each device the
  catalog does not know (`unknown-…`, `verified: false`; never dropped);
- puts every node's devices into a pool: an operator's pool for that model in the cluster
  if the node is already in one, else an automatic pool per (model, software stack),
  named `<cluster>-<model>` (`-2`, `-3`… for further stacks) and labelled
  `hetpool.io/auto-pool: "true"`;
- records the engine's state (ready / draining / drained / down), reason, devices in use
  by the engine's own work, labels, taints and partitions in node_status;
- removes nodes the engine no longer reports (and empty automatic pools). A node that
  still runs hetpool work is kept, marked `down` with reason "removed from <engine>",
  until that work ends.
Every change is audited as the connector (`connector:<cluster>`).
"""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.base import is_valid_name
from hetpool.core.errors import ConflictError, NotFoundError, SpecError
from hetpool.core.inventory import ClusterSpec, DeviceClass, DeviceGroup, DeviceModelSpec, NodeSpec, SoftwareStack
from hetpool.engines.base import ConnectorError, InventoryConnector, InventoryObservation, NodeState, ObservedNode
from hetpool.engines.registry import CONNECTOR_BACKENDS, connector_for
from hetpool.server.db.models import ConnectorSyncRow, NodeStatusRow, PlacementRow
from hetpool.server.services import audit
from hetpool.server.services.auto_pools import AUTO_POOL_LABEL, ensure_in_pool, stage_pool
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import _active_tasks, apply_specs, delete_object, load_inventory

log = logging.getLogger(__name__)

ENGINE_NODE_LABEL = "hetpool.io/engine-node-name"
# Placeholder classes for unknown devices, from the GRES / resource name the engine used.
_CLASS_HINTS = {"gpu": DeviceClass.GPU, "npu": DeviceClass.NPU, "dpu": DeviceClass.DPU, "mlu": DeviceClass.NPU, "xpu": DeviceClass.NPU}


def node_name_for(cluster: ClusterSpec, observed: str) -> str:
    name = re.sub(r"[^a-z0-9._-]+", "-", (cluster.backend_config.get("node_prefix", "") + observed).lower()).strip("-._")
    if not is_valid_name(name):
        raise SpecError(f"node name {observed!r} from the {cluster.backend} connector cannot be made a valid hetpool name ({name!r})")
    return name


def sync_cluster(ctx: ServiceContext, cluster_name: str, connector: InventoryConnector | None = None) -> dict:
    """Fetch and reconcile one cluster now. Returns the summary stored as its last sync."""
    with ctx.db.transaction() as session:
        cluster = load_inventory(ctx, session).clusters.get(cluster_name)
    if cluster is None:
        raise NotFoundError(f"cluster {cluster_name!r} not found")
    if cluster.backend.value not in CONNECTOR_BACKENDS:
        raise SpecError(
            f"cluster {cluster_name!r}: backend {cluster.backend.value!r} has no inventory connector; connectors: {', '.join(CONNECTOR_BACKENDS)}"
        )
    now = ctx.clock.now()
    try:
        connector = connector or connector_for(cluster.backend.value, cluster.backend_config, ctx.builtin_catalog)
        observation = connector.fetch()
        with ctx.db.transaction() as session:
            summary = reconcile(ctx, session, cluster, observation)
            _record(session, cluster, now, ok=True, error="", summary=summary)
        return summary
    except (ConnectorError, SpecError, ConflictError) as exc:
        log.warning("sync of cluster %s failed: %s", cluster_name, exc)
        with ctx.db.transaction() as session:
            _record(session, cluster, now, ok=False, error=str(exc), summary={})
        raise ConnectorError(f"sync of cluster {cluster_name!r} failed: {exc}") from exc


def _record(session: Session, cluster: ClusterSpec, now, *, ok: bool, error: str, summary: dict) -> None:
    row = session.get(ConnectorSyncRow, cluster.name)
    if row is None:
        row = ConnectorSyncRow(cluster=cluster.name, connector=cluster.backend.value, last_attempt_at=now, ok=ok, error=error, summary=summary)
        session.add(row)
    row.connector, row.last_attempt_at, row.ok, row.error = cluster.backend.value, now, ok, error[:4000]
    if ok:
        row.last_success_at, row.summary = now, summary


def sync_due(ctx: ServiceContext) -> list[str]:
    """Sync every connector cluster whose interval has passed (the sync worker's pass).
    A failing cluster is recorded and does not stop the others."""
    now = ctx.clock.now()
    with ctx.db.transaction() as session:
        clusters = [c for c in load_inventory(ctx, session).clusters.values() if c.backend.value in CONNECTOR_BACKENDS]
        last = {r.cluster: r.last_attempt_at for r in session.execute(select(ConnectorSyncRow)).scalars()}
    synced = []
    for cluster in clusters:
        if cluster.backend_config.get("sync", "on") == "off":
            continue
        interval = float(cluster.backend_config.get("sync_interval_s", ctx.settings.connector_sync_interval_s))
        previous = last.get(cluster.name)
        if previous is not None and previous + timedelta(seconds=interval) > now:
            continue
        try:
            sync_cluster(ctx, cluster.name)
            synced.append(cluster.name)
        except Exception:  # recorded in connector_sync; retried next interval
            log.exception("sync of %s failed", cluster.name)
    return synced


def _placeholder_model(model: str, observed_hint: str) -> DeviceModelSpec:
    """A DeviceModel for a device the catalog does not know, so it is registered and shown."""
    # The id names the engine's resource (unknown-npu-zz9 from Slurm `npu:zz9`): trust it first.
    parts = model.split("-")
    device_class = next((c for key, c in _CLASS_HINTS.items() if key in parts[1:3]), None)
    device_class = device_class or next((c for key, c in _CLASS_HINTS.items() if key in observed_hint.lower()), DeviceClass.GPU)
    return DeviceModelSpec.model_validate(
        {
            "kind": "DeviceModel",
            "name": model,
            "vendor": "generic",
            "class": device_class.value,
            "display_name": model,
            "memory_gb": 0,
            "verified": False,
            "description": "registered by an inventory connector; the catalog has no entry for this device",
        }
    )


def _stack(observed: ObservedNode) -> SoftwareStack | None:
    return SoftwareStack.model_validate(observed.stack) if observed.stack else None


def reconcile(ctx: ServiceContext, session: Session, cluster: ClusterSpec, obs: InventoryObservation) -> dict:
    inv = load_inventory(ctx, session)
    stored_pools = dict(inv.pools)  # as in the database, before this sync stages changes
    actor = f"connector:{cluster.name}"
    now = ctx.clock.now()
    catalog: DeviceCatalog = inv.catalog
    specs: list = []
    observed: dict[str, ObservedNode] = {}
    for node in obs.nodes:
        name = node_name_for(cluster, node.name)
        if name in observed:
            obs.warnings.append(f"node {node.name!r}: another node maps to hetpool name {name!r}; skipped")
            continue
        other = inv.nodes.get(name)
        if other is not None and other.cluster != cluster.name:
            obs.warnings.append(f"node {node.name!r}: hetpool node {name!r} belongs to cluster {other.cluster!r}; set backend_config.node_prefix")
            continue
        observed[name] = node
    for name, node in observed.items():
        for model in node.devices:
            if model not in catalog and not any(s.kind == "DeviceModel" and s.name == model for s in specs):
                specs.append(_placeholder_model(model, json.dumps(node.extra)))
        cpu_model = "cpu-arm64" if node.arch == "aarch64" else "cpu-x86-64"
        groups = [DeviceGroup(model=m, count=c) for m, c in sorted(node.devices.items()) if c > 0]
        spec = NodeSpec(
            name=name,
            cluster=cluster.name,
            arch=node.arch if node.arch in ("x86_64", "aarch64") else "x86_64",
            cpu_cores=max(1, int(node.cpu_cores)),
            memory_gb=max(0.001, round(float(node.memory_gb), 3)),
            devices=groups,
            stack=_stack(node),
            # The engine's own spelling of the node: backends address it by that name.
            labels={**{k: str(v)[:256] for k, v in node.labels.items() if len(k) <= 253}, ENGINE_NODE_LABEL: node.name[:256]},
            description=f"synced from {obs.connector}",
        )
        old = inv.nodes.get(name)
        if old is None or old.model_dump() != spec.model_dump():
            specs.append(spec)
        inv.nodes[name] = spec
        for model in [g.model for g in groups] or [cpu_model]:
            ensure_in_pool(inv, specs, cluster, spec, model, cluster.backend.value)
    # Nodes this connector reported before and does not report now.
    previous = {r.node: r for r in session.execute(select(NodeStatusRow).where(NodeStatusRow.source == obs.connector)).scalars()}
    gone = sorted(n for n, s in inv.nodes.items() if s.cluster == cluster.name and n not in observed and n in previous)
    kept_down, removed = [], []
    for name in gone:
        if _active_tasks(session, _placement_on(name)):
            kept_down.append(name)
            continue
        removed.append(name)
        for pool in list(inv.pools.values()):
            if name in pool.nodes:
                rest = [n for n in pool.nodes if n != name]
                stage_pool(inv, specs, pool.model_copy(update={"nodes": rest}), drop=not rest)
    dropped = [s for s in specs if isinstance(s, str)]
    specs = [s for s in specs if not isinstance(s, str)]
    for pool_name in dropped:  # before the upserts: a node may move from a dropped pool to another
        auto = stored_pools[pool_name].labels.get(AUTO_POOL_LABEL) == "true" if pool_name in stored_pools else False
        _delete(ctx, session, "Pool", pool_name, actor, auto, obs.warnings)
    results = apply_specs(ctx, session, specs, actor) if specs else []
    for name in removed:
        inv.nodes.pop(name, None)
        _delete(ctx, session, "Node", name, actor, True, obs.warnings, inv)
        row = previous.get(name)
        if row is not None:
            session.delete(row)
    for name, node in observed.items():
        _write_status(session, name, obs.connector, node.state.value, node.reason, node, now, actor)
    for name in kept_down:
        _write_status(
            session, name, obs.connector, NodeState.DOWN.value, f"removed from {obs.connector}; kept until its hetpool work ends", None, now, actor
        )
    states: dict[str, int] = {}
    for node in observed.values():
        states[node.state.value] = states.get(node.state.value, 0) + 1
    return {
        "connector": obs.connector,
        "sees": sorted(obs.sees),
        "nodes": len(observed),
        "states": states,
        "devices": _device_totals(observed.values()),
        "changes": [r for r in results if r["action"] != "unchanged"],
        "removed": removed,
        "kept_down": kept_down,
        "warnings": obs.warnings[:50],
    }


def _placement_on(node: str):
    return PlacementRow.node == node


def _device_totals(nodes) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for node in nodes:
        for model, count in node.devices.items():
            t = totals.setdefault(model, {"total": 0, "used": 0})
            t["total"] += count
            t["used"] += node.used.get(model, 0)
    return totals


def _delete(ctx: ServiceContext, session: Session, kind: str, name: str, actor: str, allowed: bool, warnings: list[str], inv=None) -> None:
    if not allowed:
        warnings.append(f"{kind} {name!r} is now empty; it was created by an operator, so it is kept")
        return
    try:
        delete_object(ctx, session, kind, name, actor, inv)
    except (ConflictError, NotFoundError) as exc:
        warnings.append(f"could not delete {kind} {name!r}: {exc}")


def _write_status(session: Session, name: str, source: str, state: str, reason: str, node: ObservedNode | None, now, actor: str) -> None:
    row = session.get(NodeStatusRow, name)
    before = None if row is None else {"state": row.state, "reason": row.reason}
    if row is None:
        row = NodeStatusRow(node=name, state=state, last_heartbeat_at=now, agent_version="", devices=[], source=source)
        session.add(row)
    row.source, row.state, row.reason, row.last_heartbeat_at = source, state, reason[:2000], now
    if node is not None:
        row.used = {m: c for m, c in node.used.items() if c > 0}
        row.labels, row.taints, row.partitions = dict(node.labels), list(node.taints), list(node.partitions)
    after = {"state": state, "reason": row.reason}
    if before != after:
        audit.record(session, actor=actor, action="node.status", object_kind="Node", object_id=name, before=before, after=after, ts=now)
