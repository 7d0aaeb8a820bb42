"""The Kubernetes backend: placed work as batch/v1 Indexed Jobs (or JobSets, Volcano Jobs,
Kueue-queued Jobs, inference Deployments). `manifests.py` is pure; `backend.py` talks to the API."""

from hetpool.backends.kubernetes.backend import KubernetesBackend, KubernetesError
from hetpool.backends.kubernetes.manifests import ManifestConfig, ManifestError, inference_manifests, job_manifest, rbac_manifests

__all__ = ["KubernetesBackend", "KubernetesError", "ManifestConfig", "ManifestError", "inference_manifests", "job_manifest", "rbac_manifests"]
