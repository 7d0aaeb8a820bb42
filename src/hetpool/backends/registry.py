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

        return LocalBackend(work_dir, config)
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


def backend_class(kind: str) -> type[Backend]:
    """The class of a backend kind, to read its declared capabilities without building one."""
    if kind == "local":
        from hetpool.backends.local import LocalBackend as cls
    elif kind == "slurm":
        from hetpool.backends.slurm import SlurmBackend as cls
    elif kind == "ray":
        from hetpool.backends.ray import RayBackend as cls
    elif kind == "kubernetes":
        from hetpool.backends.kubernetes import KubernetesBackend as cls
    else:
        raise LookupError(f"unknown backend kind {kind!r}; known: local, slurm, ray, kubernetes")
    return cls


def capability_gaps(kind: str, config: dict[str, str], needs: dict[str, str]) -> list[dict[str, str]]:
    """What a placement needs (capability -> why) that the backend does not declare, each with
    a reason a person can act on. Used by `plan`; dispatch would fail on these."""
    from hetpool.backends.base import capabilities

    declared = capabilities(backend_class(kind))
    gaps = []
    for capability, why in needs.items():
        if capability in declared and not declared[capability]:
            gaps.append({"capability": capability, "reason": f"the {kind} backend cannot do {capability} ({why})"})
    # A known limit within a declared capability: Kubernetes' default Indexed Job needs an
    # even spread of workers over nodes.
    if kind == "kubernetes" and "uneven-gang" in needs and config.get("gang_mode", "indexed-job") in ("indexed-job", "kueue"):
        gaps.append(
            {
                "capability": "gang",
                "reason": f"gang_mode {config.get('gang_mode', 'indexed-job')} needs the same number of workers on every node "
                f"({needs['uneven-gang']}); set backend_config.gang_mode to jobset or volcano",
            }
        )
    return gaps


def config_problems(kind: str, config: dict[str, str]) -> list[dict[str, str]]:
    """{"loc": "backend_config.<key>", "msg"} for each unusable setting of a cluster's backend_config,
    checked at `apply` (a 422) so that a bad run-as or security setting never reaches dispatch."""
    if kind == "local":
        from hetpool.backends.local.config import config_problems as local_problems

        return [{"loc": f"backend_config.{key}", "msg": msg} for key, msg in local_problems(config)]
    if kind == "slurm":
        from hetpool.backends.slurm.runas import config_problems as slurm_problems

        return slurm_problems(config)
    if kind == "ray":
        from hetpool.backends.ray.backend import config_problems as ray_problems

        return ray_problems(config)
    if kind == "kubernetes":
        from hetpool.backends.kubernetes.manifests import config_problems as k8s_problems

        return k8s_problems(config)
    return []
