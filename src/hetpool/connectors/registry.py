"""Which connector reads which backend. Imports are lazy: a server without the
kubernetes client installed can still sync Slurm and Ray clusters."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.connectors.base import ConnectorError, InventoryConnector

CONNECTOR_BACKENDS = ("slurm", "kubernetes", "ray")


def connector_for(backend: str, config: dict[str, str], catalog: DeviceCatalog) -> InventoryConnector:
    """A connector for a Cluster's `backend` built from its `backend_config`."""
    if backend == "slurm":
        from hetpool.connectors.slurm import SlurmConnector

        return SlurmConnector(config, catalog)
    if backend == "kubernetes":
        from hetpool.connectors.kubernetes import KubernetesConnector

        return KubernetesConnector(config, catalog)
    if backend == "ray":
        from hetpool.connectors.ray import RayConnector

        return RayConnector(config, catalog)
    raise ConnectorError(f"backend: {backend!r} has no inventory connector; connectors exist for {', '.join(CONNECTOR_BACKENDS)}")
