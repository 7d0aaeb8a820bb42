"""What every inventory connector returns, and how engine names map onto catalog models.

A connector observes; it never writes. `fetch()` returns an `InventoryObservation`: the
engine's nodes in hetpool's vocabulary (catalog models, node states, normalised labels)
plus what the connector can see at all (`sees`), so the sync service knows which facts
are authoritative (a connector that cannot see used counts must not zero them).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError


class NodeState(StrEnum):
    """hetpool's node states. Only READY nodes receive new work."""

    READY = "ready"  # Slurm IDLE / MIXED / ALLOCATED, k8s Ready, Ray ALIVE
    DRAINING = "draining"  # Slurm DRAINING / DRAIN with jobs, k8s cordoned: running work stays, nothing new
    DRAINED = "drained"  # Slurm DRAINED: drained and empty
    DOWN = "down"  # Slurm DOWN / NOT_RESPONDING / FAIL, k8s NotReady, Ray DEAD
    OFFLINE = "offline"  # host agent missed its heartbeats (set by the server, not by connectors)
    UNKNOWN = "unknown"


# Facts a connector may be able to see; declared per connector class.
SEES_NODES = "nodes"
SEES_DEVICES = "devices"  # typed accelerator counts per node
SEES_USED = "used"  # accelerators in use by the engine's own workloads
SEES_STATES = "states"
SEES_LABELS = "labels"
SEES_TAINTS = "taints"
SEES_STACK = "stack"  # driver / runtime versions
SEES_PARTITIONS = "partitions"


@dataclass
class ObservedNode:
    name: str  # as the engine names it (the sync service lower-cases it for hetpool)
    cpu_cores: int
    memory_gb: float
    state: NodeState = NodeState.READY
    reason: str = ""  # why the state is not ready (Slurm Reason, k8s condition message)
    arch: str = "x86_64"  # x86_64 | aarch64
    devices: dict[str, int] = field(default_factory=dict)  # catalog model -> total count
    used: dict[str, int] = field(default_factory=dict)  # catalog model -> in use by the engine's workloads
    labels: dict[str, str] = field(default_factory=dict)  # normalised hetpool.io/... labels (plus engine labels kept as-is)
    taints: list[str] = field(default_factory=list)  # "key=value:Effect"
    partitions: list[str] = field(default_factory=list)  # Slurm partitions, Ray / k8s node groups
    features: list[str] = field(default_factory=list)  # Slurm features / AvailableFeatures
    stack: dict | None = None  # {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}}
    extra: dict = field(default_factory=dict)  # engine facts shown to operators, never scheduled on


@dataclass
class InventoryObservation:
    connector: str  # "slurm" | "kubernetes" | "ray"
    sees: frozenset[str]
    nodes: list[ObservedNode] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # unknown models, unreadable fields … never silently dropped
    extra: dict = field(default_factory=dict)  # cluster-level facts (partitions, Ray cluster resources …)


class InventoryConnector(ABC):
    """Reads one engine's inventory. Constructed from a Cluster's `backend_config`."""

    kind: str = ""
    sees: frozenset[str] = frozenset()

    @abstractmethod
    def fetch(self) -> InventoryObservation:
        """Observe the engine now. Raises ConnectorError when the engine cannot be read."""


class ConnectorError(BackendUnavailableError):
    """The engine could not be read (command failed, API unreachable, bad credentials)."""

    def __init__(self, message: str, **kwargs) -> None:  # also accepts plain positional use like RuntimeError
        super().__init__(message, **kwargs)


def unknown_model(vendor: str, name: str) -> str:
    """The placeholder id for a device the catalog does not know (never dropped)."""
    slug = re.sub(r"[^a-z0-9]+", "-", f"{vendor}-{name}".lower()).strip("-")
    return f"unknown-{slug}"


def model_for_gres(gres_name: str, gres_type: str, catalog: DeviceCatalog, overrides: dict[str, str] | None = None) -> str | None:
    """Catalog model for Slurm GRES `gpu:a100` (name `gpu`, type `a100`), or None.

    `overrides` ("gpu:a100" -> "nvidia-a100-80g") wins; then a model whose `slurm_gres`
    equals "name:type" (the first in catalog order when several share it, e.g. the 40 GB
    and 80 GB A100); then a product-name match of the type ("910B3" -> ascend-910b3).
    """
    key = f"{gres_name}:{gres_type}".lower()
    if overrides and key in overrides:
        return overrides[key]
    if not gres_type:
        return None
    by_product = catalog.match_product(gres_type)
    sharing = [m for m in catalog.all() if m.slurm_gres.lower() == key]
    if by_product is not None and (not sharing or by_product in sharing or by_product.slurm_gres.split(":")[0] == gres_name.lower()):
        return by_product.name
    return sharing[0].name if sharing else None
