"""Applying, reading and deleting inventory objects; loading the inventory for scheduling.

`apply` validates the whole batch — fields, then references between objects, against
the database and the batch itself — before writing anything, and writes every object
and its audit event in one transaction: nothing is half-applied.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import BaseModel, ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.names import candidate_problems
from hetpool.core.compat_rule import CompatibilityRuleSpec
from hetpool.core.errors import ConflictError, NotFoundError, SpecError
from hetpool.core.inventory import ClusterSpec, DeviceClass, DeviceModelSpec, NodeSpec, PoolSpec
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.quota import SPECIAL_RESOURCES, QuotaSpec
from hetpool.core.specs import APPLY_ORDER, SPEC_KINDS, resolve_kind, spec_to_document, validation_details
from hetpool.core.states import ACTIVE_STATES, TaskState
from hetpool.core.tasks import TaskTemplateSpec
from hetpool.core.tenancy import TenantSpec
from hetpool.engines.registry import config_problems
from hetpool.server.db.models import InventoryObjectRow, PlacementRow, TaskRow
from hetpool.server.services import audit
from hetpool.server.services.agent_nodes import assigned_agent_ids
from hetpool.server.services.context import ServiceContext

INVENTORY_KINDS = [k for k in APPLY_ORDER if k != "Task"]
# Pools created by hetpool itself (connector sync, agents): an operator's pool may take their nodes.
AUTO_POOL_LABEL = "hetpool.io/auto-pool"


@dataclass
class Inventory:
    """Everything applied, typed. Device models merge the built-in catalog with overrides."""

    catalog: DeviceCatalog
    clusters: dict[str, ClusterSpec] = field(default_factory=dict)
    nodes: dict[str, NodeSpec] = field(default_factory=dict)
    pools: dict[str, PoolSpec] = field(default_factory=dict)
    tenants: dict[str, TenantSpec] = field(default_factory=dict)
    templates: dict[str, TaskTemplateSpec] = field(default_factory=dict)
    queues: dict[str, QueueSpec] = field(default_factory=dict)
    policies: dict[str, SchedulingPolicySpec] = field(default_factory=dict)
    quotas: dict[str, QuotaSpec] = field(default_factory=dict)
    # Governance kinds (ApprovalPolicy, PriceList, Budget, ReclaimPolicy): kind -> name -> spec.
    governance: dict[str, dict[str, BaseModel]] = field(default_factory=dict)
    custom_models: dict[str, DeviceModelSpec] = field(default_factory=dict)
    # Stored objects that no longer validate (written before a limit existed, or by hand in
    # the database), left out so that one bad row stops neither scheduling nor billing:
    # (kind, name) -> {"tenant": ..., "error": why}.
    invalid: dict[tuple[str, str], dict] = field(default_factory=dict)

    @property
    def policy(self) -> SchedulingPolicySpec:
        return self.policies.get("default") or SchedulingPolicySpec()

    @property
    def tenant_weights(self) -> dict[str, float]:
        return {name: t.weight for name, t in self.tenants.items()}

    def by_kind(self, kind: str) -> dict[str, BaseModel]:
        if kind == "DeviceModel":  # built on demand: listing the catalog is not free
            return {m.name: m for m in self.catalog.all()}
        known = {
            "Cluster": self.clusters,
            "Node": self.nodes,
            "Pool": self.pools,
            "Tenant": self.tenants,
            "TaskTemplate": self.templates,
            "Queue": self.queues,
            "SchedulingPolicy": self.policies,
            "Quota": self.quotas,
        }
        return known[kind] if kind in known else self.governance.setdefault(kind, {})

    def add(self, spec: BaseModel) -> None:
        kind = spec.kind
        if kind == "DeviceModel":
            self.custom_models[spec.name] = spec
            self.catalog = self.catalog.with_models([spec])
        else:
            self.by_kind(kind)[spec.name] = spec


log = logging.getLogger(__name__)
_reported: set[tuple[str, str, int]] = set()  # invalid rows already logged by this process


def load_inventory(ctx: ServiceContext, session: Session) -> Inventory:
    inv = Inventory(catalog=ctx.builtin_catalog)
    rows = session.execute(select(InventoryObjectRow)).scalars().all()
    for row in sorted(rows, key=lambda r: APPLY_ORDER.index(r.kind)):
        try:
            inv.add(SPEC_KINDS[row.kind].model_validate(row.spec))
        except ValidationError as exc:
            error = "; ".join(f"{d['loc']}: {d['msg']}" for d in validation_details(exc))
            spec = row.spec if isinstance(row.spec, dict) else {}
            inv.invalid[(row.kind, row.name)] = {"tenant": spec.get("tenant"), "error": error}
            if (row.kind, row.name, row.generation) not in _reported:
                _reported.add((row.kind, row.name, row.generation))
                log.error("stored %s %r is invalid and is left out until it is applied again: %s", row.kind, row.name, error)
    ctx.use_compat_rules(list(inv.by_kind("CompatibilityRule").values()))
    return inv


def stack_identity(stack) -> str:
    """What makes two stacks the same for a pool: driver, runtime and frameworks. The OS
    and Python strings an agent reports vary by patch level and do not split pools."""
    if stack is None:
        return ""
    return stack.model_dump_json(include={"driver", "runtime", "frameworks"})


def _check_references(inv: Inventory, spec: BaseModel) -> list[dict[str, str]]:
    """Problems with what `spec` refers to, given the inventory it would join."""
    where = f"{spec.kind}/{spec.name}"
    problems = []

    def bad(loc: str, msg: str) -> None:
        problems.append({"loc": f"{where}: {loc}", "msg": msg})

    if isinstance(spec, NodeSpec):
        if spec.cluster not in inv.clusters:
            bad("cluster", f"unknown cluster {spec.cluster!r}; known: {', '.join(sorted(inv.clusters)) or 'none'}")
        for i, group in enumerate(spec.devices):
            if group.model not in inv.catalog:
                bad(f"devices[{i}].model", f"unknown device model {group.model!r} (see `hetpool get devicemodels`)")
    elif isinstance(spec, PoolSpec):
        if spec.cluster not in inv.clusters:
            bad("cluster", f"unknown cluster {spec.cluster!r}; known: {', '.join(sorted(inv.clusters)) or 'none'}")
        if spec.model not in inv.catalog:
            bad("model", f"unknown device model {spec.model!r} (see `hetpool get devicemodels`)")
            return problems
        model = inv.catalog.get(spec.model)
        stacks = set()
        for i, node_name in enumerate(spec.nodes):
            node = inv.nodes.get(node_name)
            if node is None:
                bad(f"nodes[{i}]", f"unknown node {node_name!r}")
                continue
            if node.cluster != spec.cluster:
                bad(f"nodes[{i}]", f"node {node_name!r} is in cluster {node.cluster!r}, not {spec.cluster!r}")
            if model.device_class != DeviceClass.CPU and not any(g.model == spec.model for g in node.devices):
                bad(f"nodes[{i}]", f"node {node_name!r} has no {spec.model} devices")
            stacks.add(stack_identity(node.stack or spec.stack))
            for other in inv.pools.values():
                if other.name != spec.name and other.model == spec.model and node_name in other.nodes:
                    bad(f"nodes[{i}]", f"node {node_name!r} already belongs to pool {other.name!r} for {spec.model}")
        if len(stacks) > 1:
            bad("nodes", "a pool holds identical devices with one software stack; these nodes declare different stacks")
    elif isinstance(spec, QueueSpec):
        for i, entry in enumerate(spec.pools):
            if entry not in inv.pools and entry not in inv.catalog:
                bad(f"pools[{i}]", f"unknown pool or device model {entry!r}")
    elif isinstance(spec, QuotaSpec):
        if spec.tenant not in inv.tenants:
            bad("tenant", f"unknown tenant {spec.tenant!r}; apply the Tenant first (or in the same batch)")
        for i, limit in enumerate(spec.limits):
            if limit.resource not in SPECIAL_RESOURCES and limit.resource not in inv.catalog and limit.resource not in inv.pools:
                bad(f"limits[{i}].resource", f"{limit.resource!r} is not a device model, pool or one of {', '.join(SPECIAL_RESOURCES)}")
        problems.extend({"loc": f"{where}: {loc}", "msg": msg} for loc, msg in quota_tree_problems(inv, spec))
    elif spec.kind in ("Budget", "ApprovalPolicy", "ReclaimPolicy", "PriceList"):
        tenant = getattr(spec, "tenant", None)
        if tenant and tenant not in inv.tenants:
            bad("tenant", f"unknown tenant {tenant!r}; known: {', '.join(sorted(inv.tenants)) or 'none'}")
        cluster = getattr(spec, "cluster", None)
        if cluster and cluster not in inv.clusters:
            bad("cluster", f"unknown cluster {cluster!r}; known: {', '.join(sorted(inv.clusters)) or 'none'}")
        for i, price in enumerate(getattr(spec, "devices", None) or []):
            if price.model not in inv.catalog:
                bad(f"devices[{i}].model", f"unknown device model {price.model!r} (see `hetpool get devicemodels`)")
    elif isinstance(spec, TaskTemplateSpec):
        # Misspelt candidates are refused here, not found later in a pending task's attempts.
        for problem in candidate_problems(spec.defaults, (m.name for m in inv.catalog.all()), inv.pools):
            bad(f"defaults.{problem['loc']}", problem["msg"])
    elif isinstance(spec, CompatibilityRuleSpec):
        rules = {**inv.by_kind("CompatibilityRule"), spec.name: spec}
        try:  # the merged tables must still make a valid KB (e.g. a frameworks row's check)
            CompatibilityKB.builtin().with_rows([row for name in sorted(rules) for row in rules[name].parsed_rows()])
        except SpecError as exc:
            bad("rows", str(exc))
    elif isinstance(spec, TenantSpec):
        if spec.parent and spec.parent not in inv.tenants:
            bad("name", f"parent tenant {spec.parent!r} does not exist; apply it first (or in the same batch)")
    return problems


def quota_tree_problems(inv: Inventory, spec: QuotaSpec) -> list[tuple[str, str]]:
    """Children never exceed their parent: per (env, type, resource), the nominal amounts
    of the quotas directly below a tenant's quota must fit in it."""
    problems = []
    same = [q for q in inv.quotas.values() if q.env == spec.env and q.task_type == spec.task_type]

    def nearest_parent(quota: QuotaSpec) -> QuotaSpec | None:
        ancestors = [q for q in same if q.name != quota.name and quota.tenant.startswith(q.tenant + "/")]
        return max(ancestors, key=lambda q: q.tenant.count("/"), default=None)

    for parent in {p.name: p for p in [nearest_parent(spec), spec] if p is not None}.values():
        children = [q for q in same if q.name != parent.name and nearest_parent(q) is not None and nearest_parent(q).name == parent.name]
        for limit in parent.limits:
            total = sum(next((c.nominal for c in child.limits if c.resource == limit.resource), 0.0) for child in children)
            if total > limit.nominal + 1e-9:
                names = ", ".join(sorted(c.name for c in children))
                problems.append(
                    ("limits", f"quotas below {parent.tenant} ({names}) give {total:g} {limit.resource}; {parent.name} has only {limit.nominal:g}")
                )
    return problems


def apply_specs(ctx: ServiceContext, session: Session, specs: list[BaseModel], actor: str) -> list[dict]:
    """Upsert inventory specs (already field-validated) after checking references."""
    inv = load_inventory(ctx, session)
    ordered = sorted(specs, key=lambda s: APPLY_ORDER.index(s.kind))
    ordered = _release_from_auto_pools(ctx, session, inv, ordered, actor)
    problems: list[dict[str, str]] = []
    seen: set[tuple[str, str]] = set()
    for spec in ordered:
        key = (spec.kind, spec.name)
        if key in seen:
            problems.append({"loc": f"{spec.kind}/{spec.name}", "msg": "appears twice in the input"})
        seen.add(key)
        inv.add(spec)
    for spec in ordered:
        problems.extend(_check_references(inv, spec))
        if isinstance(spec, ClusterSpec):  # run-as / security settings: refused here, not at dispatch
            bad = config_problems(spec.backend.value, spec.backend_config)
            problems.extend({"loc": f"Cluster/{spec.name}: {p['loc']}", "msg": p["msg"]} for p in bad)
    agent_ids, agent_problems = assigned_agent_ids(session, [s for s in ordered if isinstance(s, NodeSpec)])
    problems.extend(agent_problems)
    if problems:
        raise SpecError(
            f"{len(problems)} problem(s) in the input; nothing was applied: {problems[0]['loc']}: {problems[0]['msg']}",
            details=problems,
        )
    now = ctx.clock.now()
    results = []
    for spec in ordered:
        document = spec_to_document(spec)
        row = session.execute(
            select(InventoryObjectRow).where(InventoryObjectRow.kind == spec.kind, InventoryObjectRow.name == spec.name)
        ).scalar_one_or_none()
        if row is None:
            row = InventoryObjectRow(
                kind=spec.kind,
                name=spec.name,
                cluster=getattr(spec, "cluster", None),
                model=getattr(spec, "model", None),
                spec=document,
                generation=1,
                created_at=now,
                updated_at=now,
            )
            session.add(row)
            audit.record(session, actor=actor, action="inventory.create", object_kind=spec.kind, object_id=spec.name, after=document, ts=now)
            results.append({"kind": spec.kind, "name": spec.name, "action": "created"})
        elif row.spec == document:
            results.append({"kind": spec.kind, "name": spec.name, "action": "unchanged"})
        else:
            before = row.spec
            row.spec = document
            row.cluster = getattr(spec, "cluster", None)
            row.model = getattr(spec, "model", None)
            row.generation += 1
            row.updated_at = now
            audit.record(
                session, actor=actor, action="inventory.update", object_kind=spec.kind, object_id=spec.name, before=before, after=document, ts=now
            )
            results.append({"kind": spec.kind, "name": spec.name, "action": "configured"})
        if isinstance(spec, NodeSpec):  # who may report for it: the agent the spec names, by id
            row.agent_user_id = agent_ids.get(spec.agent) if spec.agent else None
    session.flush()
    return results


def _release_from_auto_pools(ctx: ServiceContext, session: Session, inv: Inventory, ordered: list, actor: str) -> list:
    """An operator's pool that lists a node takes it from the automatic pool it is in (the
    automatic pool shrinks, or goes when empty). The caller's transaction makes this all
    or nothing with the rest of the batch."""
    named = {s.name for s in ordered if isinstance(s, PoolSpec)}
    extra: dict[str, PoolSpec] = {}
    for spec in ordered:
        if not isinstance(spec, PoolSpec) or spec.labels.get(AUTO_POOL_LABEL) == "true":
            continue
        for auto in list(inv.pools.values()):
            auto = extra.get(auto.name, auto)
            if auto.name in named or auto.labels.get(AUTO_POOL_LABEL) != "true" or auto.model != spec.model:
                continue
            taken = [n for n in auto.nodes if n in spec.nodes]
            if not taken:
                continue
            rest = [n for n in auto.nodes if n not in taken]
            if rest:
                extra[auto.name] = auto.model_copy(update={"nodes": rest})
            else:
                extra.pop(auto.name, None)
                inv.pools.pop(auto.name, None)
                delete_object(ctx, session, "Pool", auto.name, actor)
    for pool in extra.values():
        inv.pools[pool.name] = pool
    return sorted([*ordered, *extra.values()], key=lambda s: APPLY_ORDER.index(s.kind))


def list_objects(ctx: ServiceContext, session: Session, kind: str) -> list[dict]:
    kind = resolve_kind(kind)
    if kind == "Task":
        raise SpecError("tasks are listed with GET /api/v1/tasks (hetpool get tasks)")
    inv = load_inventory(ctx, session)
    return [spec_to_document(s) for _, s in sorted(inv.by_kind(kind).items())]


def get_object(ctx: ServiceContext, session: Session, kind: str, name: str) -> dict:
    kind = resolve_kind(kind)
    inv = load_inventory(ctx, session)
    spec = inv.by_kind(kind).get(name)
    if spec is None:
        raise NotFoundError(f"{kind} {name!r} not found")
    return spec_to_document(spec)


def delete_object(ctx: ServiceContext, session: Session, kind: str, name: str, actor: str, inv: Inventory | None = None) -> None:
    """Delete an object nothing uses. `inv`: the caller's current inventory (saves a reload
    when a sync removes many nodes in one transaction)."""
    kind = resolve_kind(kind)
    row = session.execute(select(InventoryObjectRow).where(InventoryObjectRow.kind == kind, InventoryObjectRow.name == name)).scalar_one_or_none()
    if row is None:
        if kind == "DeviceModel" and name in ctx.builtin_catalog:
            raise ConflictError(f"DeviceModel {name!r} is built into the catalog and cannot be deleted")
        raise NotFoundError(f"{kind} {name!r} not found")
    inv = inv or load_inventory(ctx, session)
    users = _dependents(session, inv, kind, name)
    if users:
        raise ConflictError(f"{kind} {name!r} is still used by {', '.join(users[:5])}; delete or change those first")
    audit.record(session, actor=actor, action="inventory.delete", object_kind=kind, object_id=name, before=row.spec, ts=ctx.clock.now())
    session.delete(row)


def _dependents(session: Session, inv: Inventory, kind: str, name: str) -> list[str]:
    if kind == "Cluster":
        return (
            [f"PriceList/{n}" for n, o in inv.governance.get("PriceList", {}).items() if getattr(o, "cluster", None) == name]
            + [f"Node/{n.name}" for n in inv.nodes.values() if n.cluster == name]
            + [f"Pool/{p.name}" for p in inv.pools.values() if p.cluster == name]
        )
    if kind == "Node":
        users = [f"Pool/{p.name}" for p in inv.pools.values() if name in p.nodes]
        return users + _active_tasks(session, PlacementRow.node == name)
    if kind == "Tenant":
        children = [f"Tenant/{t}" for t in inv.tenants if t.startswith(name + "/")]
        quotas = [f"Quota/{q.name}" for q in inv.quotas.values() if q.tenant == name]
        governed = [f"{k}/{n}" for k, objs in inv.governance.items() for n, o in objs.items() if getattr(o, "tenant", None) == name]
        return children + quotas + governed + _unfinished_tasks(session, TaskRow.tenant == name)
    if kind == "TaskTemplate":
        return _unfinished_tasks(session, TaskRow.template == name)
    if kind == "Pool":
        return [f"Queue/{q.name}" for q in inv.queues.values() if name in q.pools] + _active_tasks(session, PlacementRow.pool == name)
    if kind == "DeviceModel":
        return [f"Pool/{p.name}" for p in inv.pools.values() if p.model == name] + [
            f"Node/{n.name}" for n in inv.nodes.values() if any(g.model == name for g in n.devices)
        ]
    return []


def _unfinished_tasks(session: Session, condition) -> list[str]:
    """Tasks not yet ended that would fail if the object they name disappeared."""
    ended = [s.value for s in TaskState if s.terminal]
    rows = session.execute(select(TaskRow.id).where(condition, TaskRow.state.not_in(ended)).limit(20)).scalars()
    return [f"Task/{tid}" for tid in rows]


def _active_tasks(session: Session, condition) -> list[str]:
    rows = session.execute(
        select(TaskRow.id)
        .join(PlacementRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt))
        .where(condition, TaskRow.state.in_([s.value for s in ACTIVE_STATES]))
    ).scalars()
    return [f"Task/{tid}" for tid in rows]
