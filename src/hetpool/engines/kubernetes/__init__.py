"""The Kubernetes engine: placed work as batch/v1 Indexed Jobs (or JobSets, Volcano Jobs,
Kueue-queued Jobs, inference Deployments) — `manifests.py` is pure, `compute.py` talks to the
API; nodes, devices and usage from the API (`inventory.py`, `devices.py`)."""

from hetpool.engines.base import Engine
from hetpool.engines.kubernetes.compute import KubernetesBackend, KubernetesError
from hetpool.engines.kubernetes.config import config_problems
from hetpool.engines.kubernetes.inventory import KubernetesConnector
from hetpool.engines.kubernetes.manifests import ManifestConfig, ManifestError, inference_manifests, job_manifest, rbac_manifests

ENGINE = Engine(kind="kubernetes", compute=KubernetesBackend, build=KubernetesBackend, config_problems=config_problems, inventory=KubernetesConnector)

__all__ = [
    "ENGINE",
    "KubernetesBackend",
    "KubernetesConnector",
    "KubernetesError",
    "ManifestConfig",
    "ManifestError",
    "inference_manifests",
    "job_manifest",
    "rbac_manifests",
]
