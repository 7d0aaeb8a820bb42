"""Per-process caches for the submit path, each checked against the database on every use.

A submit needs the whole inventory (to resolve its template and check that it could ever
run) and an idle snapshot of the estate. Loading and validating every inventory object,
then building the snapshot, was more than a third of a submit's CPU time, and both change
rarely. So each replica keeps the last ones and revalidates them with one aggregate query:
any create, update or delete of an inventory object changes its fingerprint, and node
liveness and device health are read every time. Nothing here can go stale across replicas.

Callers get shallow copies of the inventory's maps and must not change the specs in them.
"""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from hetpool.scheduling.snapshot import Snapshot, build_snapshot
from hetpool.server.db.models import InventoryObjectRow
from hetpool.server.services.context import HotPathCache
from hetpool.server.services.inventory import Inventory, load_inventory
from hetpool.server.services.nodes import health_view


def inventory_fingerprint(session: Session) -> tuple:
    # A create raises max(id) (and max(updated_at), which covers SQLite reusing the id of a
    # deleted last row), an update raises its generation, a delete lowers the count.
    row = session.execute(
        select(
            func.count(InventoryObjectRow.id),
            func.sum(InventoryObjectRow.generation),
            func.max(InventoryObjectRow.id),
            func.max(InventoryObjectRow.updated_at),
        )
    ).one()
    return tuple(str(v) for v in row)


def _copy(inv: Inventory) -> Inventory:
    return Inventory(
        catalog=inv.catalog,
        clusters=dict(inv.clusters),
        nodes=dict(inv.nodes),
        pools=dict(inv.pools),
        tenants=dict(inv.tenants),
        templates=dict(inv.templates),
        queues=dict(inv.queues),
        policies=dict(inv.policies),
        quotas=dict(inv.quotas),
        governance={kind: dict(objects) for kind, objects in inv.governance.items()},
        custom_models=dict(inv.custom_models),
        invalid=dict(inv.invalid),
    )


def cached_inventory(cache: HotPathCache, ctx, session: Session) -> tuple[Inventory, tuple]:
    """The inventory as of this transaction, and its fingerprint."""
    key = inventory_fingerprint(session)
    with cache.lock:
        if cache.inventory is not None and cache.inventory_key == key:
            return _copy(cache.inventory), key
    inv = load_inventory(ctx, session)
    with cache.lock:
        cache.inventory, cache.inventory_key = inv, key
        cache.inventory_loads += 1
    return _copy(inv), key


def idle_snapshot(cache: HotPathCache, session: Session, inv: Inventory, inventory_key: tuple) -> Snapshot:
    """The estate with nothing allocated: offline nodes and broken devices still excluded,
    as in `Snapshot.emptied()` of the current snapshot, without reading allocations."""
    offline, broken, _engine_used = health_view(session)
    key = (inventory_key, tuple(sorted(offline)), tuple(sorted((n, tuple(sorted(d))) for n, d in broken.items())))
    with cache.lock:
        if cache.idle is not None and cache.idle_key == key:
            return cache.idle.emptied()
    models = {m.name: m for m in inv.catalog.all()}
    snap = build_snapshot(
        list(inv.clusters.values()), list(inv.nodes.values()), list(inv.pools.values()), models, [], unhealthy_nodes=offline, unhealthy_devices=broken
    )
    with cache.lock:
        cache.idle, cache.idle_key = snap, key
    return snap.emptied()


def read_inventory(ctx, session: Session) -> Inventory:
    """The inventory for a read-only caller (stats, plan, /metrics), from the cache."""
    return cached_inventory(ctx.hot_path, ctx, session)[0]
