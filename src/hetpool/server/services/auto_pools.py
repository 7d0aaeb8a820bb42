"""Automatic pools: a node's devices of one model join the pool of identical devices and
software stack in its cluster, created on demand as `<cluster>-<model>` (`-2`, `-3`…
for further stacks) and labelled `hetpool.io/auto-pool: "true"`. Used by the connector
sync and by agents that register without naming a pool. Operators' own pools are
never changed here, except that a node already in one stays there."""

from __future__ import annotations

import hashlib

from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec, SoftwareStack
from hetpool.server.services.inventory import AUTO_POOL_LABEL, Inventory, stack_identity

SOURCE_LABEL = "hetpool.io/source"
__all__ = ["AUTO_POOL_LABEL", "SOURCE_LABEL", "ensure_in_pool", "pool_stack_key", "stack_key", "stage_pool"]


def stack_key(stack: SoftwareStack | None) -> str:
    return hashlib.sha1(stack_identity(stack).encode()).hexdigest() if stack else ""


def ensure_in_pool(inv: Inventory, specs: list, cluster: ClusterSpec, node: NodeSpec, model: str, source: str) -> None:
    """Put `node`'s `model` devices in a pool of this cluster (an existing one if the node is
    in it, else the automatic pool for its stack), keeping the pool's stack uniform."""
    for pool in inv.pools.values():
        if pool.cluster == cluster.name and pool.model == model and node.name in pool.nodes:
            if pool.labels.get(AUTO_POOL_LABEL) != "true" or pool_stack_key(inv, pool, node.name) in ("", stack_key(node.stack)):
                return
            # The node's stack changed: it leaves this automatic pool for the right one.
            rest = [n for n in pool.nodes if n != node.name]
            if rest:
                stage_pool(inv, specs, pool.model_copy(update={"nodes": rest}))
            else:
                stage_pool(inv, specs, pool.model_copy(update={"nodes": rest}), drop=True)
            break
    key = stack_key(node.stack)
    base = f"{cluster.name}-{model}"
    for suffix in [""] + [f"-{i}" for i in range(2, 50)]:
        name = (base + suffix)[:63].strip("-._")
        pool = inv.pools.get(name)
        if pool is None:
            stage_pool(
                inv,
                specs,
                PoolSpec(
                    name=name,
                    cluster=cluster.name,
                    model=model,
                    nodes=[node.name],
                    labels={AUTO_POOL_LABEL: "true", SOURCE_LABEL: source},
                ),
            )
            return
        if pool.labels.get(AUTO_POOL_LABEL) != "true" or pool.model != model or pool.cluster != cluster.name:
            continue
        if pool_stack_key(inv, pool, node.name) in ("", key) or not pool.nodes:
            if node.name not in pool.nodes:
                stage_pool(inv, specs, pool.model_copy(update={"nodes": [*pool.nodes, node.name]}))
            return


def pool_stack_key(inv: Inventory, pool: PoolSpec, except_node: str) -> str:
    """The stack shared by the pool's other nodes ("" when there are none)."""
    for name in pool.nodes:
        if name != except_node and name in inv.nodes:
            return stack_key(inv.nodes[name].stack or pool.stack)
    return ""


def stage_pool(inv: Inventory, specs: list, pool: PoolSpec, drop: bool = False) -> None:
    """Stage a pool change; a dropped pool is remembered in `specs` as its name (a str)."""
    specs[:] = [s for s in specs if isinstance(s, str) or not (s.kind == "Pool" and s.name == pool.name)]
    if drop:
        inv.pools.pop(pool.name, None)
        specs.append(pool.name)
        return
    inv.pools[pool.name] = pool
    specs.append(pool)
