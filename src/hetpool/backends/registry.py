"""Backend kind -> instance, for the server (`ServiceContext.backend_for`).

Engine backends are imported only when a cluster of that kind is used, so a server
without Slurm / Ray / Kubernetes clients installed still starts.
"""

from __future__ import annotations

from pathlib import Path

from hetpool.backends.base import Backend
from hetpool.catalog.devices import DeviceCatalog


def make_backend(kind: str, config: dict[str, str], catalog: DeviceCatalog, work_dir: Path) -> Backend:
    """A backend of `kind` built from a cluster's backend_config, keeping its state in work_dir."""
    if kind == "local":
        from hetpool.backends.local import LocalBackend

        return LocalBackend(work_dir)
    if kind == "slurm":
        from hetpool.backends.slurm import SlurmBackend

        return SlurmBackend(config, catalog, work_dir)
    if kind == "ray":
        from hetpool.backends.ray import RayBackend

        return RayBackend(config, catalog, work_dir)
    if kind == "kubernetes":
        from hetpool.backends.kubernetes import KubernetesBackend

        return KubernetesBackend(config, catalog, work_dir)
    raise LookupError(f"unknown backend kind {kind!r}; known: local, slurm, ray, kubernetes")
