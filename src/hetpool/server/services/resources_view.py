"""The resource tree: clusters → nodes → devices in one read, for the dashboard's
Resources page (and anyone who wants the whole estate at a glance).

Each node carries its capability profile (device models and counts, software stack,
features, labels) and its status (state from its agent or connector, and every device as
idle, busy, abnormal or offline). Device status is classified exactly as the pool profile
(services/profiles.py) does, from one scheduling snapshot, so the two pages agree.

Filters narrow the tree: device class, model, cluster, status (a node state, or a device
status some device of the node is in) and framework support ("torch>=2.3", "mindspore"),
judged by the compatibility knowledge base against each node's installed stack.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceModelSpec, NodeSpec, PoolSpec, SoftwareStack
from hetpool.core.tasks import FrameworkRequest
from hetpool.scheduling.snapshot import Snapshot, node_features
from hetpool.server.db.models import ConnectorSyncRow, NodeStatusRow
from hetpool.server.services.cluster_state import live_snapshot
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, load_inventory

DEVICE_STATUSES = ("idle", "busy", "abnormal", "offline")
NODE_STATES = ("ready", "draining", "drained", "down", "offline", "unknown")
STATUS_FILTERS = DEVICE_STATUSES + tuple(s for s in NODE_STATES if s not in DEVICE_STATUSES)


@dataclass(frozen=True)
class TreeFilters:
    device_class: str | None = None
    model: str | None = None
    cluster: str | None = None
    status: str | None = None
    framework: str | None = None  # as typed: "torch>=2.3", "mindspore 2.3", "paddle"

    def any(self) -> bool:
        return any((self.device_class, self.model, self.cluster, self.status, self.framework))


def parse_framework(ctx: ServiceContext, text: str) -> FrameworkRequest:
    """ "torch>=2.3" / "pytorch 2.4" / "mindspore" → a FrameworkRequest; SpecError naming
    the known frameworks or the version syntax otherwise."""
    match = re.fullmatch(r"\s*([A-Za-z][A-Za-z0-9_-]*)\s*(.*?)\s*", text)
    if match is None:
        raise SpecError(f"framework: write a name and an optional version spec, e.g. 'torch>=2.3' or 'mindspore'; got {text!r}")
    name, version = match.groups()
    if ctx.compat.canonical_framework(name) is None:
        raise SpecError(f"framework: unknown framework {name!r}; known: {', '.join(ctx.compat.frameworks())}")
    try:
        return FrameworkRequest(name=name, version=version)
    except ValidationError as exc:
        first = exc.errors()[0]
        raise SpecError(f"framework: {first['msg'].removeprefix('Value error, ')}") from None


def _device_status(free: float, node_healthy: bool) -> str:
    # The same order as the pool profile: a broken device is abnormal even on a dead node.
    if free < -0.5:
        return "abnormal"
    if not node_healthy:
        return "offline"
    return "idle" if free >= 1.0 - 1e-9 else "busy"


def _counts(statuses: list[str]) -> dict[str, int]:
    return {"total": len(statuses), **{s: statuses.count(s) for s in DEVICE_STATUSES}}


def _add(total: dict[str, int], part: dict[str, int]) -> None:
    for key, value in part.items():
        total[key] = total.get(key, 0) + value


def _stack_view(stack: SoftwareStack | None) -> dict | None:
    return stack.model_dump(mode="json", exclude_defaults=True) if stack else None


class _TreeBuilder:
    """One pass over the inventory, the snapshot and the status rows."""

    def __init__(self, ctx: ServiceContext, inv: Inventory, snap: Snapshot, states: dict[str, NodeStatusRow], filters: TreeFilters) -> None:
        self.ctx, self.inv, self.snap, self.states, self.filters = ctx, inv, snap, states, filters
        self.request = parse_framework(ctx, filters.framework) if filters.framework else None
        self.pools_of: dict[tuple[str, str], list[PoolSpec]] = {}
        for pool in sorted(inv.pools.values(), key=lambda p: p.name):
            for node in pool.nodes:
                self.pools_of.setdefault((node, pool.model), []).append(pool)

    def framework_verdict(self, model: DeviceModelSpec, stack: SoftwareStack | None) -> dict | None:
        if self.request is None:
            return None
        verdict = self.ctx.compat.check(model, stack, self.request, has_image=False)
        return {"ok": verdict.ok, "reason": verdict.reason, "detail": verdict.detail}

    def group(self, node: NodeSpec, node_index: int, status: NodeStatusRow | None, model_name: str, count: int) -> dict:
        model = self.inv.catalog.get(model_name) if model_name in self.inv.catalog else None
        pools = self.pools_of.get((node.name, model_name), [])
        row = next((r for r in (self.snap.row_of(node.name, p.name) for p in pools) if r is not None), None)
        healthy = bool(self.snap.node_healthy[node_index])
        health = {int(d.get("index", -1)): d for d in (status.devices if status else []) if isinstance(d, dict)}
        if row is not None:
            free = [float(v) for v in self.snap.dev_free[row]]
        else:
            # Devices in no pool are never scheduled: report what the agent or engine says.
            engine_used = int((status.used or {}).get(model_name, 0)) if status else 0
            free = [-1.0 if health.get(i, {}).get("health") == "abnormal" else (0.0 if i < engine_used else 1.0) for i in range(count)]
        devices = []
        for index, value in enumerate(free):
            report = health.get(index, {})
            devices.append(
                {
                    "index": index,
                    "status": _device_status(value, healthy),
                    "health": report.get("health", ""),
                    "utilisation_pct": report.get("utilisation_pct"),
                    "memory_used_mib": report.get("memory_used_mib"),
                }
            )
        view = self.snap.pools[self.snap.pool_by_name[pools[0].name]] if pools and pools[0].name in self.snap.pool_by_name else None
        stack = node.stack or (pools[0].stack if pools else None)
        features = sorted(view.feature_report.features) if view is not None else sorted(model.features if model else [])
        return {
            "model": model_name,
            "display_name": model.display_name if model else model_name,
            "class": model.device_class.value if model else "",
            "vendor": model.vendor.value if model else "",
            "memory_gb": model.memory_gb if model else None,
            "count": count,
            "pools": [p.name for p in pools],
            "features": sorted(set(features) | node_features(node)),
            "devices": devices,
            "counts": _counts([d["status"] for d in devices]),
            "framework": self.framework_verdict(model, stack) if model else None,
        }

    def group_matches(self, group: dict) -> bool:
        f = self.filters
        if f.device_class and group["class"] != f.device_class:
            return False
        if f.model and group["model"] != f.model:
            return False
        return not (self.request is not None and not (group["framework"] or {}).get("ok"))

    def node(self, node: NodeSpec) -> dict | None:
        index = self.snap.node_by_name[node.name]
        status = self.states.get(node.name)
        groups = [self.group(node, index, status, g.model, g.count) for g in node.devices]
        if any((self.filters.device_class, self.filters.model, self.request)):
            groups = [g for g in groups if self.group_matches(g)]
            if not groups:
                return None
        state = status.state if status is not None else "ready"
        statuses = [d["status"] for g in groups for d in g["devices"]]
        if self.filters.status and self.filters.status != state and self.filters.status not in statuses:
            return None
        return {
            "name": node.name,
            "cluster": node.cluster,
            "zone": node.zone,
            "network_group": node.network_group,
            "arch": node.arch,
            "cpu_cores": node.cpu_cores,
            "memory_gb": node.memory_gb,
            "schedulable": node.schedulable,
            "labels": {**node.labels, **((status.labels or {}) if status else {})},
            "taints": (status.taints or []) if status else [],
            "state": state,
            "reason": status.reason if status else "",
            "source": status.source if status else "",  # "": declared in the inventory, nothing reports on it
            "last_heartbeat_at": status.last_heartbeat_at.isoformat() if status and status.source == "agent" else None,
            "agent_version": status.agent_version if status else "",
            "stack": _stack_view(node.stack or next((p.stack for p in self.inv.pools.values() if node.name in p.nodes and p.stack), None)),
            "features": sorted({f for g in groups for f in g["features"]}),
            "groups": groups,
            "devices": _counts(statuses),
        }

    def pool(self, pool: PoolSpec, nodes: dict[str, dict]) -> dict | None:
        """A pool's line in its cluster: counts over its shown nodes' devices of its model."""
        model = self.inv.catalog.get(pool.model) if pool.model in self.inv.catalog else None
        f = self.filters
        if (f.device_class and (model is None or model.device_class.value != f.device_class)) or (f.model and pool.model != f.model):
            return None
        statuses = [
            d["status"]
            for n in pool.nodes
            if n in nodes
            for g in nodes[n]["groups"]
            if g["model"] == pool.model and pool.name in g["pools"]
            for d in g["devices"]
        ]
        if f.any() and not statuses:
            return None
        view = self.snap.pools[self.snap.pool_by_name[pool.name]] if pool.name in self.snap.pool_by_name else None
        return {
            "name": pool.name,
            "model": pool.model,
            "class": model.device_class.value if model else "",
            "nodes": list(pool.nodes),
            "devices": _counts(statuses),
            "stack": _stack_view(view.stack if view is not None else pool.stack),
            "price_per_hour": pool.price_per_hour,
            "shareable": pool.shareable,
            "reserved_for": pool.reserved_for.model_dump(mode="json") if pool.reserved_for else None,
        }


def _connector(row: ConnectorSyncRow | None) -> dict | None:
    if row is None:
        return None
    return {
        "connector": row.connector,
        "ok": row.ok,
        "error": row.error,
        "last_attempt_at": row.last_attempt_at.isoformat(),
        "last_success_at": row.last_success_at.isoformat() if row.last_success_at else None,
    }


def _check_names(inv: Inventory, filters: TreeFilters) -> None:
    if filters.cluster and filters.cluster not in inv.clusters:
        raise SpecError(f"cluster: unknown cluster {filters.cluster!r}; known: {', '.join(sorted(inv.clusters)) or 'none'}")
    if filters.model and filters.model not in inv.catalog:
        raise SpecError(f"model: unknown device model {filters.model!r} (see GET /api/v1/objects/devicemodels)")


def resource_tree(ctx: ServiceContext, session: Session, filters: TreeFilters) -> dict:
    inv = load_inventory(ctx, session)
    _check_names(inv, filters)
    snap = live_snapshot(ctx, session)
    states = {r.node: r for r in session.execute(select(NodeStatusRow)).scalars()}
    syncs = {r.cluster: r for r in session.execute(select(ConnectorSyncRow)).scalars()}
    builder = _TreeBuilder(ctx, inv, snap, states, filters)
    nodes_of: dict[str, list[NodeSpec]] = {}
    for node in sorted(inv.nodes.values(), key=lambda n: n.name):
        nodes_of.setdefault(node.cluster, []).append(node)
    pools_of: dict[str, list[PoolSpec]] = {}
    for pool in sorted(inv.pools.values(), key=lambda p: p.name):
        pools_of.setdefault(pool.cluster, []).append(pool)
    totals = _counts([])
    clusters = []
    for cluster in sorted(inv.clusters.values(), key=lambda c: c.name):
        if filters.cluster and cluster.name != filters.cluster:
            continue
        shown = [n for n in map(builder.node, nodes_of.get(cluster.name, [])) if n is not None]
        if filters.any() and not shown:
            continue
        by_name = {n["name"]: n for n in shown}
        pools = [p for p in (builder.pool(spec, by_name) for spec in pools_of.get(cluster.name, [])) if p is not None]
        counts = _counts([])
        for node in shown:
            _add(counts, node["devices"])
        _add(totals, counts)
        clusters.append(
            {
                "name": cluster.name,
                "description": cluster.description,
                "backend": cluster.backend.value,
                "zone": cluster.zone,
                "region": cluster.region,
                "labels": cluster.labels,
                "connector": _connector(syncs.get(cluster.name)),
                "devices": counts,
                "nodes": shown,
                "pools": pools,
            }
        )
    in_use = sorted({g.model for n in inv.nodes.values() for g in n.devices})
    classes = sorted({inv.catalog.get(m).device_class.value for m in in_use if m in inv.catalog})
    return {
        "filters": {
            "class": filters.device_class,
            "model": filters.model,
            "cluster": filters.cluster,
            "status": filters.status,
            "framework": filters.framework,
        },
        "framework": builder.request.model_dump(mode="json") if builder.request else None,
        "totals": {**totals, "clusters": len(clusters), "nodes": sum(len(c["nodes"]) for c in clusters)},
        "clusters": clusters,
        "options": {
            "classes": classes,
            "models": in_use,
            "clusters": sorted(inv.clusters),
            "statuses": list(STATUS_FILTERS),
            "frameworks": ctx.compat.frameworks(),
        },
    }
