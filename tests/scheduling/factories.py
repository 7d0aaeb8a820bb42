"""Small builders for scheduling tests: inventory specs, tasks and snapshots.

Specs go through `model_validate` with their user-facing aliases (`class`, `type`), so
the tests exercise the same validation a YAML document would.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec, TaskType
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.scheduling.running import RunningTask
from hetpool.scheduling.snapshot import Allocation, Snapshot, build_snapshot

CLUSTER = "c1"

# Stacks that the builtin compatibility KB understands.
CUDA_STACK = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
ROCM_STACK = {"runtime": {"name": "rocm", "version": "6.2"}}


def cann_stack(version: str) -> dict[str, Any]:
    return {"driver": "24.1.0", "runtime": {"name": "cann", "version": version}}


def catalog_models() -> dict:
    return {m.name: m for m in DeviceCatalog.builtin()}


def compat_check():
    return CompatibilityKB.builtin().check


def cluster(name: str = CLUSTER, **fields: Any) -> ClusterSpec:
    return ClusterSpec.model_validate({"kind": "Cluster", "name": name, **fields})


def node(
    name: str,
    model: str | None = None,
    count: int = 8,
    *,
    cpu: int = 128,
    mem: float = 1024,
    stack: dict | None = None,
    **fields: Any,
) -> NodeSpec:
    doc: dict[str, Any] = {"kind": "Node", "name": name, "cluster": fields.pop("cluster", CLUSTER), "cpu_cores": cpu, "memory_gb": mem}
    if model is not None:
        doc["devices"] = [{"model": model, "count": count}]
    if stack is not None:
        doc["stack"] = stack
    doc.update(fields)
    return NodeSpec.model_validate(doc)


def pool(name: str, model: str, nodes: Iterable[str], **fields: Any) -> PoolSpec:
    doc: dict[str, Any] = {"kind": "Pool", "name": name, "cluster": fields.pop("cluster", CLUSTER), "model": model, "nodes": list(nodes)}
    doc.update(fields)
    return PoolSpec.model_validate(doc)


def task(
    name: str = "t",
    *,
    tenant: str = "ai-lab/nlp/p",
    type: str = "training",
    devices: dict | None = None,
    **fields: Any,
) -> TaskSpec:
    doc: dict[str, Any] = {"kind": "Task", "name": name, "tenant": tenant, "type": type}
    if devices is not None:
        doc.setdefault("per_worker", {})["devices"] = devices
    per_worker = fields.pop("per_worker", None)
    if per_worker:
        doc.setdefault("per_worker", {}).update(per_worker)
    doc.update(fields)
    return TaskSpec.model_validate(doc)


def alloc(node_name: str, pool_name: str, indices: Iterable[int], *, fraction: float = 1.0, cpu: float = 1, mem: float = 1) -> Allocation:
    return Allocation(node=node_name, pool=pool_name, device_indices=tuple(indices), device_fraction=fraction, cpu=cpu, memory_gb=mem)


def make_snapshot(
    nodes: list[NodeSpec],
    pools: list[PoolSpec],
    allocations: Iterable[Allocation] = (),
    *,
    clusters: list[ClusterSpec] | None = None,
    unhealthy_nodes: set[str] = frozenset(),
) -> Snapshot:
    return build_snapshot(
        clusters or [cluster()],
        nodes,
        pools,
        catalog_models(),
        list(allocations),
        unhealthy_nodes=set(unhealthy_nodes),
    )


def running_task(
    task_id: str,
    allocations: Iterable[Allocation],
    *,
    tenant: str = "ai-lab/nlp/p",
    priority: str = "normal",
    task_type: str = "training",
    started_at: datetime | None = None,
    expected_end: datetime | None = None,
    preemptible: bool = True,
) -> RunningTask:
    """A running task holding `allocations` (pass the same allocations to the snapshot)."""
    return RunningTask(
        id=task_id,
        tenant=tenant,
        priority_rank=Priority(priority).rank,
        task_type=TaskType(task_type),
        allocations=tuple(allocations),
        started_at=started_at or datetime(2026, 1, 1, tzinfo=UTC),
        expected_end=expected_end,
        preemptible=preemptible,
    )


def snapshot_with_running(
    nodes: list[NodeSpec],
    pools: list[PoolSpec],
    running: Iterable[RunningTask] = (),
    *,
    clusters: list[ClusterSpec] | None = None,
    unhealthy_nodes: set[str] = frozenset(),
    unhealthy_devices: dict[str, set[int]] | None = None,
) -> Snapshot:
    """A snapshot holding every allocation of `running` (as the server builds it)."""
    return build_snapshot(
        clusters or [cluster()],
        nodes,
        pools,
        catalog_models(),
        [a for r in running for a in r.allocations],
        unhealthy_nodes=set(unhealthy_nodes),
        unhealthy_devices=unhealthy_devices,
    )
