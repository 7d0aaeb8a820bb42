"""Pure functions: a `LaunchRequest` and the Cluster's backend_config → Kubernetes manifests.

Nothing here talks to a cluster; `backend.py` sends what these functions build. Every
batch/v1, apps/v1 and core/v1 object is validated in the tests against the official 1.33
OpenAPI schemas (kubernetes-validate, strict). The JobSet and Volcano objects are custom
resources, for which kubernetes-validate has no schemas: the tests check them structurally
and validate their embedded pod / job templates against the core schemas.

Gang design (see docs/backends.md#the-kubernetes-backend):

- `indexed-job` / `kueue`: ONE batch/v1 Job, `completionMode: Indexed`, completions =
  parallelism = workers, backoffLimit 0; the rank is the completion index. All pods share one
  template, so one Job can pin a gang only when its workers have one shape and each placed
  node holds the same number of them: one node → a nodeSelector; several → a required node
  affinity for exactly those nodes plus a topology spread (maxSkew 1, minDomains = nodes),
  which lands k pods on each of them. Anything else is refused with a hint to `jobset` /
  `volcano`. Which index lands on which of the placed nodes is the scheduler's choice, so
  HETPOOL_NODE comes from the downward API.
- `jobset` / `volcano`: one replicated job / task PER RANK, each with its own exact template
  (node, environment, resources): every placement is expressible.

Isolation (issue 14; docs/backends.md#the-kubernetes-backend):

- a namespace per tenant (`namespace_mode: tenant`, the default): `tenant_namespace` maps the
  tenant path to a DNS label, injectively (a hash where the readable form could be ambiguous),
  or `tenant_namespaces` names them; `namespace_mode: single` (or a `namespace` key alone)
  keeps every tenant in one namespace, for a single-tenant cluster;
- every pod runs as a non-root uid/gid (`run_as_user` / `run_as_group`, default 1000; 0 is
  refused), without privilege escalation, with every capability dropped, seccomp
  RuntimeDefault, no service-account token, no host namespaces and no volumes at all (so no
  hostPath): what PodSecurity "restricted" demands. Keys that would loosen this are refused;
- the pod's environment is the task's (worker_environment), never the server's.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from typing import Any, Protocol

from hetpool.engines.base import LaunchRequest, WorkerLaunch, worker_environment
from hetpool.engines.kubernetes.config import (  # noqa: F401 (re-exported: the config was split out of this module)
    DEFAULT_NAMESPACE,
    DEFAULT_NODE_LABEL,
    FORBIDDEN_KEYS,
    GANG_MODES,
    ConfigError,
    ManifestConfig,
    ManifestError,
    config_problems,
    is_k8s_name,
    model_resources,
    parse_tolerations,
    tenant_namespace,
)

NODE_NAME_FIELD = "metadata.name"  # node_selector_label value that pins by node name (matchFields) instead of a label
SERVE_PORT_ENV = "HETPOOL_SERVE_PORT"  # in request.env: run the request as a Deployment + Service on this port
CONTAINER = "worker"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"  # annotation (and label) on an Indexed Job's pods
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"

LABEL_JOB = "hetpool.io/job"
LABEL_TASK = "hetpool.io/task-id"
LABEL_ATTEMPT = "hetpool.io/attempt"
LABEL_TENANT = "hetpool.io/tenant"
LABEL_RANK = "hetpool.io/rank"  # on per-rank templates (jobset, volcano) only
ANNOTATION_TASK = "hetpool.io/task-id"  # the exact values: label values are restricted, annotations are not
ANNOTATION_ATTEMPT = "hetpool.io/attempt"
ANNOTATION_TENANT = "hetpool.io/tenant"
ANNOTATION_TASK_NAME = "hetpool.io/task-name"
ANNOTATION_JOB_NAME = "hetpool.io/job-name"

JOBSET_API = ("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
VOLCANO_API = ("batch.volcano.sh", "v1alpha1", "jobs", "Job")

# 50, not 63: the controllers derive longer names from it and those must stay DNS labels too:
# Indexed Job pod hostnames `<name>-<index>`, JobSet hostnames `<name>-r<rank>-0-0`, Volcano
# `<name>-r<rank>-0` (ranks < 1024).
MAX_NAME = 50


class DeviceModels(Protocol):
    """What the manifests need of the device catalog (passed in: backends do not import it)."""

    def __contains__(self, name: object) -> bool: ...

    def get(self, name: str) -> Any: ...  # has .k8s_resource


# ----------------------------------------------------------------------------- names


def k8s_name(name: str, max_len: int = MAX_NAME) -> str:
    """A DNS-1035 label for `name`, deterministic (it is the idempotency key). A name that had
    to change keeps a hash of the original, so two task ids never collapse into one name."""
    clean = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", name.lower())).strip("-")
    if not clean or not clean[0].isalpha():
        clean = f"h-{clean}".rstrip("-")
    if clean == name and len(clean) <= max_len:
        return clean
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{clean[: max_len - 9].rstrip('-')}-{digest}"


def label_value(value: str) -> str:
    """A valid label value (≤ 63 of [A-Za-z0-9._-], alphanumeric at both ends); the exact
    value goes to an annotation."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", value)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", clean)


def cpu_quantity(cores: float) -> str:
    return str(int(cores)) if float(cores).is_integer() else f"{round(cores * 1000)}m"


def memory_quantity(gb: float) -> str:
    return f"{max(1, round(gb * 1024))}Mi"


# ----------------------------------------------------------------------------- pieces


def device_resource(worker: WorkerLaunch, cfg: ManifestConfig, catalog: DeviceModels) -> str | None:
    """The extended resource a worker's devices are requested as, or None for CPU-only work."""
    if not worker.device_indices or not worker.model:
        return None
    if worker.model in cfg.resource_models:
        return cfg.resource_models[worker.model]
    resource = catalog.get(worker.model).k8s_resource if worker.model in catalog else ""
    if resource == "cpu":
        return None  # a CPU "device" is a socket: cpu / memory requests cover it
    if not resource or "/" not in resource:
        raise ManifestError(
            f"device model {worker.model!r} has no Kubernetes resource name: give the catalog model a k8s_resource, "
            f"or map it in backend_config resource_models (e.g. 'nvidia.com/mig-1g.10gb={worker.model}')"
        )
    return resource


def _resources(worker: WorkerLaunch, resource: str | None) -> dict:
    requests = {}
    if worker.cpu > 0:
        requests["cpu"] = cpu_quantity(worker.cpu)
    if worker.memory_gb > 0:
        requests["memory"] = memory_quantity(worker.memory_gb)
    out: dict = {"requests": requests} if requests else {}
    if resource:
        # Extended resources are limits (requests default to them and may not differ).
        out["limits"] = {resource: str(len(worker.device_indices))}
    return out


def _tolerations(resource: str | None, cfg: ManifestConfig) -> list[dict]:
    # GKE, AKS and the vendors' install guides taint accelerator nodes with the resource name.
    vendor = [{"key": resource, "operator": "Exists", "effect": "NoSchedule"}] if resource else []
    return vendor + [t for t in cfg.tolerations if t not in vendor]


def _node_term(cfg: ManifestConfig, nodes: list[str]) -> dict:
    if cfg.node_selector_label == NODE_NAME_FIELD:
        return {"matchFields": [{"key": NODE_NAME_FIELD, "operator": "In", "values": nodes}]}
    return {"matchExpressions": [{"key": cfg.node_selector_label, "operator": "In", "values": nodes}]}


def _pin_one(cfg: ManifestConfig, node: str) -> dict:
    """Pod spec fields that pin every pod of the template to `node`."""
    if cfg.node_selector_label == NODE_NAME_FIELD:
        return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_node_term(cfg, [node])]}}}}
    return {"nodeSelector": {cfg.node_selector_label: node}}


def _pin_shared(cfg: ManifestConfig, name: str, workers: list[WorkerLaunch], what: str) -> dict:
    """Pod spec fields that put the pods of ONE shared template on the placed nodes."""
    per_node = Counter(w.node for w in workers)
    if len(per_node) == 1:
        return _pin_one(cfg, workers[0].node)
    if len(set(per_node.values())) != 1:
        shown = ", ".join(f"{n}: {c}" for n, c in sorted(per_node.items()))
        raise ManifestError(
            f"{name}: workers per node differ ({shown}); one {what} shares one pod template and can only spread evenly. "
            "Use gang_mode jobset or volcano (one template per rank), or place the gang evenly"
        )
    nodes = sorted(per_node)
    topology_key = DEFAULT_NODE_LABEL if cfg.node_selector_label == NODE_NAME_FIELD else cfg.node_selector_label
    return {
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [_node_term(cfg, nodes)]}}},
        # With the affinity above the domains are exactly the placed nodes; maxSkew 1 with
        # minDomains = their number forces the same count of pods onto each of them.
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "minDomains": len(nodes),
                "topologyKey": topology_key,
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {LABEL_JOB: name}},
            }
        ],
    }


def _env_list(values: dict[str, str], from_fields: dict[str, str] | None = None) -> list[dict]:
    env = [{"name": k, "value": v} for k, v in values.items() if k not in (from_fields or {})]
    env += [{"name": k, "valueFrom": {"fieldRef": {"fieldPath": path}}} for k, path in (from_fields or {}).items()]
    return env


def _container_devices(env: dict[str, str], workers: list[WorkerLaunch]) -> None:
    """Device variables for the pod of `workers` (one worker, or all that share a template)."""
    # The device plugin picks the physical devices and the container sees them as 0..n-1, so
    # the placed host indices would point at the wrong (or no) devices inside the pod.
    # hetpool's choice stays visible as HETPOOL_PLACED_DEVICE_INDICES (as on Slurm) where one
    # value holds for every pod of the template.
    worker = workers[0]
    local = ",".join(str(i) for i in range(len(worker.device_indices)))
    env["HETPOOL_DEVICE_INDICES"] = local
    if worker.visible_devices_env:
        env[worker.visible_devices_env] = local
    if all(w.device_indices == worker.device_indices for w in workers):
        env["HETPOOL_PLACED_DEVICE_INDICES"] = ",".join(str(i) for i in worker.device_indices)


def _labels(request: LaunchRequest, name: str) -> dict[str, str]:
    labels = {
        "app.kubernetes.io/managed-by": "hetpool",
        LABEL_JOB: name,
        LABEL_TASK: label_value(request.task_id),
        LABEL_ATTEMPT: str(request.attempt),
        LABEL_TENANT: label_value(request.tenant),
    }
    return {k: v for k, v in labels.items() if v}


def _metadata(request: LaunchRequest, name: str, cfg: ManifestConfig, extra_labels: dict | None = None) -> dict:
    annotations = {
        ANNOTATION_TASK: request.task_id,
        ANNOTATION_ATTEMPT: str(request.attempt),
        ANNOTATION_TENANT: request.tenant,
        ANNOTATION_TASK_NAME: request.name,
        ANNOTATION_JOB_NAME: request.job_name,
    }
    return {"name": name, "namespace": cfg.namespace, "labels": {**_labels(request, name), **(extra_labels or {})}, "annotations": annotations}


def _image(request: LaunchRequest, cfg: ManifestConfig) -> str:
    image = request.image or cfg.image_default
    if not image:
        raise ManifestError(f"{request.job_name}: no container image: the task sets none and the cluster's backend_config has no image_default")
    return image


def _check(request: LaunchRequest) -> None:
    if not request.workers:
        raise ManifestError(f"{request.job_name}: a launch request needs at least one worker")
    ranks = sorted(w.rank for w in request.workers)
    if ranks != list(range(len(ranks))):
        raise ManifestError(f"{request.job_name}: worker ranks must be 0..{len(ranks) - 1}, got {ranks}")


def _shape(request: LaunchRequest, cfg: ManifestConfig, catalog: DeviceModels, name: str, what: str) -> tuple[WorkerLaunch, str | None]:
    """The one worker shape a shared template can carry (refused when the workers differ)."""
    shapes = {(w.model, w.pool, len(w.device_indices), w.visible_devices_env, w.cpu, w.memory_gb) for w in request.workers}
    if len(shapes) > 1:
        raise ManifestError(
            f"{name}: the workers differ in model, pool, device count, cpu or memory; one {what} shares one pod template. "
            "Use gang_mode jobset or volcano (one template per rank)"
        )
    first = min(request.workers, key=lambda w: w.rank)
    return first, device_resource(first, cfg, catalog)


def _pod_spec(request: LaunchRequest, cfg: ManifestConfig, env: list[dict], worker: WorkerLaunch, resource: str | None, placement: dict) -> dict:
    container: dict = {
        "name": CONTAINER,
        "image": _image(request, cfg),
        "command": ["/bin/sh", "-c", request.command],
        "env": env,
        # PodSecurity "restricted", per container as the standard checks it.
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "privileged": False,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }
    resources = _resources(worker, resource)
    if resources:
        container["resources"] = resources
    spec: dict = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        # No API credentials in the pod, no host namespaces (and no volumes: no hostPath).
        "automountServiceAccountToken": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": cfg.run_as_user,
            "runAsGroup": cfg.run_as_group,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        **placement,
    }
    tolerations = _tolerations(resource, cfg)
    if tolerations:
        spec["tolerations"] = tolerations
    if cfg.priority_class:
        spec["priorityClassName"] = cfg.priority_class
    if cfg.service_account:
        spec["serviceAccountName"] = cfg.service_account
    if request.stop_grace_s:
        # A checkpointable task's grace (core/checkpoint.py): Kubernetes sends SIGTERM on
        # delete and SIGKILL this long after it.
        spec["terminationGracePeriodSeconds"] = math.ceil(request.stop_grace_s)
    return spec


def serve_port(request: LaunchRequest) -> int | None:
    """The port of an inference request (request.env HETPOOL_SERVE_PORT), else None."""
    text = request.env.get(SERVE_PORT_ENV, "").strip()
    if not text:
        return None
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ManifestError(f"{request.job_name}: {SERVE_PORT_ENV}={text!r} is not a port number")
    return int(text)


# ----------------------------------------------------------------------------- batch/v1 Job


def job_manifest(request: LaunchRequest, cfg: ManifestConfig, catalog: DeviceModels) -> dict:
    """The Indexed Job of gang modes indexed-job and kueue (see the module docstring)."""
    _check(request)
    name = k8s_name(request.job_name)
    worker, resource = _shape(request, cfg, catalog, name, "Indexed Job")
    size = len(request.workers)
    values = worker_environment(request, worker)
    _container_devices(values, request.workers)
    if size > 1:
        values["HETPOOL_MASTER_ADDR"] = f"{name}-0.{name}"  # index 0's hostname in the headless Service's subdomain
    fields = {"HETPOOL_WORKER_RANK": f"metadata.annotations['{COMPLETION_INDEX}']", "HETPOOL_NODE": "spec.nodeName"}
    pod = _pod_spec(request, cfg, _env_list(values, fields), worker, resource, _pin_shared(cfg, name, request.workers, "Indexed Job"))
    if size > 1:
        pod["subdomain"] = name
    kueue = {KUEUE_QUEUE_LABEL: cfg.kueue_queue} if cfg.gang_mode == "kueue" else {}
    spec: dict = {
        "completionMode": "Indexed",
        "completions": size,
        "parallelism": size,
        "backoffLimit": 0,  # a gang cannot go on without a member: the first failed pod fails the Job
        "template": {"metadata": {"labels": _labels(request, name)}, "spec": pod},
    }
    if cfg.ttl_after_finished_s is not None:
        spec["ttlSecondsAfterFinished"] = cfg.ttl_after_finished_s
    if kueue:
        spec["suspend"] = True  # Kueue unsuspends the Job once its whole quota is admitted
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": _metadata(request, name, cfg, kueue), "spec": spec}


def headless_service(name: str, cfg: ManifestConfig, owner: dict | None = None) -> dict:
    """DNS for a gang's pods (`<name>-<index>.<name>`); owned by the Job so it goes with it."""
    metadata: dict = {"name": name, "namespace": cfg.namespace, "labels": {"app.kubernetes.io/managed-by": "hetpool", LABEL_JOB: name}}
    if owner:
        meta = owner["metadata"]
        ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"], "blockOwnerDeletion": False}
        metadata["ownerReferences"] = [ref]
    spec = {"clusterIP": "None", "selector": {LABEL_JOB: name}, "publishNotReadyAddresses": True}
    return {"apiVersion": "v1", "kind": "Service", "metadata": metadata, "spec": spec}


# ----------------------------------------------------------------------------- per-rank CRDs


def _rank_template(request: LaunchRequest, cfg: ManifestConfig, catalog: DeviceModels, name: str, worker: WorkerLaunch, master: str) -> dict:
    values = worker_environment(request, worker)
    _container_devices(values, [worker])
    if len(request.workers) > 1:
        values["HETPOOL_MASTER_ADDR"] = master
    resource = device_resource(worker, cfg, catalog)
    pod = _pod_spec(request, cfg, _env_list(values), worker, resource, _pin_one(cfg, worker.node))
    return {"metadata": {"labels": {**_labels(request, name), LABEL_RANK: str(worker.rank)}}, "spec": pod}


def jobset_manifest(request: LaunchRequest, cfg: ManifestConfig, catalog: DeviceModels) -> dict:
    """jobset.x-k8s.io/v1alpha2 JobSet: one replicated job per rank, each pinned to its node."""
    _check(request)
    name = k8s_name(request.job_name)
    replicated = []
    for w in sorted(request.workers, key=lambda w: w.rank):
        pod = _rank_template(request, cfg, catalog, name, w, f"{name}-r0-0-0.{name}")  # JobSet hostnames: <jobset>-<rjob>-<job>-<pod>
        job_spec = {"completions": 1, "parallelism": 1, "backoffLimit": 0, "template": pod}
        replicated.append({"name": f"r{w.rank}", "replicas": 1, "template": {"metadata": {"labels": pod["metadata"]["labels"]}, "spec": job_spec}})
    spec: dict = {
        "replicatedJobs": replicated,
        "network": {"enableDNSHostnames": True, "subdomain": name, "publishNotReadyAddresses": True},
        "successPolicy": {"operator": "All"},
        "failurePolicy": {"maxRestarts": 0},
    }
    if cfg.ttl_after_finished_s is not None:
        spec["ttlSecondsAfterFinished"] = cfg.ttl_after_finished_s
    group, version, _, kind = JOBSET_API
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": _metadata(request, name, cfg), "spec": spec}


def volcano_manifest(request: LaunchRequest, cfg: ManifestConfig, catalog: DeviceModels) -> dict:
    """batch.volcano.sh/v1alpha1 Job (vcjob): one task per rank, minAvailable = all (a real gang)."""
    _check(request)
    name = k8s_name(request.job_name)
    tasks = []
    for w in sorted(request.workers, key=lambda w: w.rank):
        pod = _rank_template(request, cfg, catalog, name, w, f"{name}-r0-0.{name}")  # the svc plugin: <job>-<task>-<index>
        tasks.append({"name": f"r{w.rank}", "replicas": 1, "template": pod})
    spec: dict = {
        "schedulerName": "volcano",
        "minAvailable": len(tasks),
        "queue": cfg.volcano_queue,
        "policies": [{"event": "PodFailed", "action": "TerminateJob"}, {"event": "PodEvicted", "action": "TerminateJob"}],
        "plugins": {"svc": [], "env": []},
        "tasks": tasks,
    }
    if cfg.priority_class:
        spec["priorityClassName"] = cfg.priority_class
    if cfg.ttl_after_finished_s is not None:
        spec["ttlSecondsAfterFinished"] = cfg.ttl_after_finished_s
    group, version, _, kind = VOLCANO_API
    return {"apiVersion": f"{group}/{version}", "kind": kind, "metadata": _metadata(request, name, cfg), "spec": spec}


# ----------------------------------------------------------------------------- inference


def inference_manifests(request: LaunchRequest, port: int, cfg: ManifestConfig, catalog: DeviceModels) -> list[dict]:
    """apps/v1 Deployment (replicas = workers, pinned like an Indexed Job) + a ClusterIP Service
    on `port`. Used when request.env has HETPOOL_SERVE_PORT. Replicas are interchangeable:
    they get no rank or rendezvous variables."""
    _check(request)
    name = k8s_name(request.job_name)
    worker, resource = _shape(request, cfg, catalog, name, "Deployment")
    values = worker_environment(request, worker)
    _container_devices(values, request.workers)
    for key in ("HETPOOL_WORKER_RANK", "HETPOOL_MASTER_ADDR", "HETPOOL_MASTER_PORT"):
        values.pop(key)
    pod = _pod_spec(
        request, cfg, _env_list(values, {"HETPOOL_NODE": "spec.nodeName"}), worker, resource, _pin_shared(cfg, name, request.workers, "Deployment")
    )
    pod["restartPolicy"] = "Always"  # the only policy a Deployment allows
    container = pod["containers"][0]
    container["ports"] = [{"name": "serve", "containerPort": port, "protocol": "TCP"}]
    container["readinessProbe"] = {"tcpSocket": {"port": port}, "periodSeconds": 10}
    labels = _labels(request, name)
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(request, name, cfg),
        "spec": {
            "replicas": len(request.workers),
            "selector": {"matchLabels": {LABEL_JOB: name}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(request, name, cfg),
        "spec": {
            "type": "ClusterIP",
            "selector": {LABEL_JOB: name},
            "ports": [{"name": "serve", "port": port, "targetPort": port, "protocol": "TCP"}],
        },
    }
    return [deployment, service]


# ----------------------------------------------------------------------------- RBAC


# What backend.py calls, resource by resource: the tests check every request it made against it.
RBAC_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "delete"]},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["create", "get", "delete"]},
    {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["create", "get", "delete"]},
]


def rbac_manifests(namespace: str = DEFAULT_NAMESPACE, identity: str = "hetpool-backend") -> list[dict]:
    """ServiceAccount + Role + RoleBinding for the identity hetpool's backend uses in `namespace`."""
    meta = {"namespace": namespace, "labels": {"app.kubernetes.io/managed-by": "hetpool"}}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": identity, **meta}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": identity, **meta}, "rules": RBAC_RULES},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": identity, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": identity},
            "subjects": [{"kind": "ServiceAccount", "name": identity, "namespace": namespace}],
        },
    ]


def tenant_namespace_manifests(namespace: str, identity: str = "hetpool-backend", identity_namespace: str = DEFAULT_NAMESPACE) -> list[dict]:
    """What a cluster admin creates once per tenant namespace (hetpool creates no namespaces: that
    needs cluster-wide rights it should not hold): the Namespace, enforcing PodSecurity
    "restricted"; the backend's Role there, bound to its ServiceAccount in `identity_namespace`;
    and a NetworkPolicy that lets pods receive traffic only from their own namespace (a gang
    talks to itself; another tenant's pods cannot reach it)."""
    labels = {"app.kubernetes.io/managed-by": "hetpool"}
    security = {f"pod-security.kubernetes.io/{mode}": "restricted" for mode in ("enforce", "audit", "warn")}
    meta = {"namespace": namespace, "labels": labels}
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": {**labels, **security}}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": identity, **meta}, "rules": RBAC_RULES},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": identity, **meta},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": identity},
            "subjects": [{"kind": "ServiceAccount", "name": identity, "namespace": identity_namespace}],
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "hetpool-same-namespace-only", **meta},
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]},
        },
    ]
