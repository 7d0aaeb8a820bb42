"""Runs placed work on a Kubernetes cluster through the official `kubernetes` client.

`pip install 'hetpool[kubernetes]'`; the client is imported on first use only. The manifests
come from `manifests.py` (pure); this module sends them and reads the answers back as raw
JSON (API-shaped dicts, as the inventory connector does). Tested against a recorded-protocol
fake API server (tests/engines/k8s_jobs_fake.py), because no kube-apiserver can run where
this project is built (the project's one allowed exception to testing against the real
engine): the fake's answers are shaped like the API's, the manifests are validated against
the official schemas, and the fake's job "execution" is emulation.

The job's Kubernetes name is `k8s_name(request.job_name)`: the idempotency key. A submit that
gets 409 AlreadyExists adopts the existing object (after checking its hetpool.io/task-id and
attempt annotations). State lives in the cluster, except one thing: a cancelled job is
deleted, and only a marker file under `<work_dir>/cancelled/<namespace>/<name>` tells
"cancelled" from "lost" afterwards.

Each tenant's work goes to its own namespace (manifests.py, `namespace_mode: tenant`), so the
handle's job_id is `<namespace>/<name>`; with `namespace_mode: single` it is the bare name, in
the one configured namespace. `find` (which knows no tenant) reads the namespace from
`<work_dir>/namespaces/<name>`, written at submit.
"""

from __future__ import annotations

import codecs
import json
import re
import threading
from pathlib import Path
from types import SimpleNamespace

from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import (
    Backend,
    JobHandle,
    JobPhase,
    JobStatus,
    LaunchRequest,
    LogChunk,
    PermanentEngineError,
    SupportsGang,
    SupportsLogStreaming,
    Unsupported,
    job_name,
)
from hetpool.engines.kubernetes.client import api_client, api_error, import_client, where
from hetpool.engines.kubernetes.config import SHARED_TEMPLATE_MODES
from hetpool.engines.kubernetes.manifests import (
    ANNOTATION_ATTEMPT,
    ANNOTATION_TASK,
    COMPLETION_INDEX,
    CONTAINER,
    JOBSET_API,
    KUEUE_QUEUE_LABEL,
    LABEL_JOB,
    LABEL_RANK,
    VOLCANO_API,
    DeviceModels,
    ManifestConfig,
    headless_service,
    inference_manifests,
    is_k8s_name,
    job_manifest,
    jobset_manifest,
    k8s_name,
    serve_port,
    volcano_manifest,
)

FORBIDDEN_HINT = "the identity needs the Role of docs/backends.md#the-kubernetes-backend in this namespace"
_KIND_NAMES = {"job": "Job", "jobset": "JobSet", "vcjob": "Volcano Job", "deployment": "Deployment", "service": "Service"}
_VOLCANO_FAILED = ("Failed", "Terminated", "Aborted")
_VOLCANO_PENDING = ("Pending", "Inqueue")


class KubernetesError(PermanentEngineError):
    """The API refused what the backend sent (400 / 409 / 422, or a name held by another task).
    An API that cannot be reached or read (401, 403, 5xx, network) is BackendUnavailableError."""


def _true_conditions(obj: dict) -> dict[str, dict]:
    return {c.get("type", ""): c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("status") == "True"}


def _annotations(obj: dict) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def _size(kind: str, obj: dict) -> int:
    spec = obj.get("spec") or {}
    if kind == "job":
        return int(spec.get("completions") or 1)
    if kind == "jobset":
        return sum(int(r.get("replicas") or 1) for r in spec.get("replicatedJobs") or [])
    if kind == "vcjob":
        return sum(int(t.get("replicas") or 1) for t in spec.get("tasks") or [])
    return int(spec.get("replicas") or 0)


def _terminal(kind: str, obj: dict) -> bool:
    conditions = _true_conditions(obj)
    if kind == "job":
        return "Complete" in conditions or "Failed" in conditions
    if kind == "jobset":
        return "Completed" in conditions or "Failed" in conditions
    if kind == "vcjob":
        return ((obj.get("status") or {}).get("state") or {}).get("phase") in ("Completed", *_VOLCANO_FAILED)
    return False  # a Deployment serves until it is deleted


# ----------------------------------------------------------------------------- pods


def _pod_ended(pod: dict) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _container(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == CONTAINER), {})


def _by_rank(pods: list[dict]) -> dict[int, dict]:
    """Rank → newest pod. Indexed Jobs carry the completion index, per-rank templates our
    rank label; a Deployment's interchangeable replicas are numbered by age."""
    ranked: dict[int, dict] = {}
    newest_first = sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), p["metadata"]["name"]), reverse=True)
    for pod in newest_first:
        meta = pod["metadata"]
        text = (meta.get("annotations") or {}).get(COMPLETION_INDEX) or (meta.get("labels") or {}).get(LABEL_RANK)
        if text is not None and text.isdigit():
            ranked.setdefault(int(text), pod)
    if not ranked and pods:
        return dict(enumerate(reversed(newest_first)))
    return ranked


def _failures(by_rank: dict[int, dict]) -> list[tuple[int | None, str]]:
    """(exit code, message) of each failed worker: the cause first. Pods the Job controller
    deleted to stop the gang (deletionTimestamp) end with 137 / 143; they come last."""
    found = []
    for rank, pod in by_rank.items():
        status = pod.get("status") or {}
        container = _container(pod)
        term = (container.get("state") or {}).get("terminated") or (container.get("lastState") or {}).get("terminated")
        if status.get("phase") != "Failed" and not (term and term.get("exitCode")):
            continue
        code = term.get("exitCode") if term else None
        reason = (term or {}).get("reason") or status.get("reason") or ""
        text = f"worker rank {rank} exited with code {code}" if code is not None else f"worker rank {rank} failed"
        text += f" ({reason})" if reason and reason != "Error" else ""
        if status.get("message"):
            text += f": {status['message']}"
        stopped = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        found.append((stopped, (term or {}).get("finishedAt") or "~", rank, code, text))
    return [(code, text) for *_, code, text in sorted(found)]


def _waiting(rank: int, pod: dict) -> str:
    """Why a pod is not running yet, as Kubernetes says it (Unschedulable, ImagePullBackOff …)."""
    status = pod.get("status") or {}
    scheduled = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
    if scheduled and scheduled.get("status") == "False":
        return f"rank {rank}: {scheduled.get('reason', 'Unschedulable')}: {scheduled.get('message', '')}".rstrip(": ")
    waiting = (_container(pod).get("state") or {}).get("waiting")
    if waiting and waiting.get("reason") not in (None, "ContainerCreating", "PodInitializing"):
        return f"rank {rank}: {waiting['reason']}: {waiting.get('message', '')}".rstrip(": ")
    return ""


def _progress(by_rank: dict[int, dict], size: int, what: str) -> JobStatus:
    running = sum((p.get("status") or {}).get("phase") == "Running" for p in by_rank.values())
    done = sum((p.get("status") or {}).get("phase") == "Succeeded" for p in by_rank.values())
    waiting = "; ".join(filter(None, (_waiting(r, p) for r, p in sorted(by_rank.items()))))
    if running or done:
        message = f"{running} running, {done}/{size} {what}" + (f"; {waiting}" if waiting else "")
        return JobStatus(JobPhase.RUNNING, message=message)
    return JobStatus(JobPhase.PENDING, message=waiting or ("pods starting" if by_rank else "no pods yet"))


class KubernetesBackend(Backend, SupportsGang, SupportsLogStreaming):
    """Connection keys are the inventory connector's (kubeconfig / context, or host / token /
    token_file / ca_file / insecure_skip_tls_verify, in_cluster, timeout_s); the manifest keys
    are `ManifestConfig`'s. See docs/backends.md#the-kubernetes-backend."""

    kind = "kubernetes"
    UNSUPPORTED_FEATURES = {
        "fractional-devices": Unsupported("Kubernetes extended resources are whole units: a pod cannot request part of a device"),
        "checkpoint-signal": Unsupported(
            "a deleted pod gets SIGTERM (then SIGKILL after terminationGracePeriodSeconds, the task's grace)",
            advice="catch SIGTERM in the task, or set checkpoint.signal: SIGTERM",
        ),
    }

    @classmethod
    def unsupported_features(cls, config: dict[str, str]) -> dict[str, Unsupported]:
        limits = dict(cls.UNSUPPORTED_FEATURES)
        mode = config.get("gang_mode", "indexed-job")
        if mode in SHARED_TEMPLATE_MODES:
            # One pod template for all workers, spread evenly by topology constraints.
            advice = "set backend_config.gang_mode to jobset or volcano"
            limits["uneven-gang"] = Unsupported(f"gang_mode {mode} needs the same number of workers on every node", counts_as="gang", advice=advice)
            limits["mixed-worker-shapes"] = Unsupported(
                f"gang_mode {mode} gives every worker one pod template: the workers cannot differ in model, pool, devices, cpu or memory",
                advice=advice,
            )
        return limits

    def __init__(self, config: dict[str, str], catalog: DeviceModels, work_dir: Path) -> None:
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.settings = ManifestConfig.from_config(self.config)
        self.catalog = catalog
        self.namespace = self.settings.namespace  # namespace_mode single: the only one; else the default for bare names
        self.work_dir = Path(work_dir)
        try:
            self.timeout_s = float(self.config.get("timeout_s") or "10")
        except ValueError:
            raise ValueError(f"kubernetes backend_config: timeout_s {self.config['timeout_s']!r} is not a number") from None
        host = self.config.get("host", "")
        if host and not re.match(r"^https?://", host):
            raise ValueError(f"kubernetes backend_config: host {host!r} must start with https:// or http://")
        self.where = where(self.config)
        self._api: SimpleNamespace | None = None
        self._lock = threading.Lock()

    # -- the contract ---------------------------------------------------------------------

    def submit(self, request: LaunchRequest) -> JobHandle:
        name = k8s_name(request.job_name)
        port = serve_port(request)
        cfg = self.settings.for_tenant(request.tenant)  # the tenant's namespace
        # Every manifest is built before the first call: a request that cannot be expressed
        # leaves nothing behind in the cluster.
        if port is not None:
            kind, objects = "deployment", inference_manifests(request, port, cfg, self.catalog)
        elif cfg.gang_mode == "jobset":
            kind, objects = "jobset", [jobset_manifest(request, cfg, self.catalog)]
        elif cfg.gang_mode == "volcano":
            kind, objects = "vcjob", [volcano_manifest(request, cfg, self.catalog)]
        else:
            kind, objects = "job", [job_manifest(request, cfg, self.catalog)]
        ref = self._remember(cfg.namespace, name)
        handle = JobHandle(backend=self.kind, job_id=ref)
        if self._cancelled(ref):
            return handle  # cancelled before this (repeated) submit: never start it again
        created = self._create(kind, objects[0])
        if created is None:  # 409 AlreadyExists: the name is the idempotency key
            created = self._read(kind, ref)
            if created is None:
                raise BackendUnavailableError(f"{_KIND_NAMES[kind]} {cfg.namespace}/{name} already existed but is gone now (deleted meanwhile?)")
            self._check_owner(kind, created, request.task_id, request.attempt)
        # The gang's / server's Service comes second, also on a repeated submit: a submit that
        # died in between leaves it missing, and this is where it is repaired.
        if kind == "job" and len(request.workers) > 1:
            self._create("service", headless_service(name, cfg, owner=created))
        elif kind == "deployment":
            self._create("service", objects[1])
        return handle

    def find(self, task_id: str, attempt: int) -> JobHandle | None:
        name = self._recalled(k8s_name(job_name(task_id, attempt)))
        found = self._get(name)
        if found is None:
            return None
        notes = _annotations(found[1])
        if notes.get(ANNOTATION_TASK) != task_id or notes.get(ANNOTATION_ATTEMPT) != str(attempt):
            return None
        return JobHandle(backend=self.kind, job_id=name)

    def poll(self, handles: list[JobHandle]) -> dict[str, JobStatus]:
        return {h.job_id: self._status(h.job_id) for h in handles}

    def cancel(self, handle: JobHandle) -> None:
        name = handle.job_id
        if not self._valid(name):
            return
        found = self._get(name)
        if found is None or _terminal(*found):
            return  # gone already, or finished: cancelling does nothing
        kind, _ = found
        # The marker first: once deleted, only it tells "cancelled" from "lost".
        self._mark_cancelled(name)
        self._delete(kind, name)
        if kind == "deployment":
            self._delete("service", name)  # a Job's headless Service goes with it (ownerReference)

    def logs(self, handle: JobHandle, rank: int = 0, offset: int = 0, limit: int = 65536) -> LogChunk:
        name = handle.job_id
        valid = self._valid(name)
        found = self._get(name) if valid else None
        by_rank = _by_rank(self._pods(name)) if valid else {}
        if found is None and not by_rank:
            if valid and self._cancelled(name):
                return LogChunk(text="", offset=offset, complete=True)  # deleted with its pods
            raise ValueError(f"unknown kubernetes job {name!r} in namespace {self._split(name)[0]}")
        size = _size(*found) if found else max(by_rank) + 1
        if not 0 <= rank < size:
            raise ValueError(f"job {name} has no worker rank {rank}; valid ranks: {list(range(size))}")
        pod = by_rank.get(rank)
        if pod is None:  # not created yet, or deleted
            return LogChunk(text="", offset=offset, complete=found is None or _terminal(*found))
        want = max(limit, 4)  # at least one whole UTF-8 character
        # The API has no byte offset: ask for the first offset+want bytes and keep the tail.
        data = self._log_bytes(name, pod["metadata"]["name"], offset + want)
        at_eof = len(data) < offset + want
        chunk = data[offset:]
        final = _pod_ended(pod) and at_eof
        decoder = codecs.getincrementaldecoder("utf-8")("replace")
        text = decoder.decode(chunk, final=final)
        held_back = len(decoder.getstate()[0])  # never split a character across chunks
        return LogChunk(text=text, offset=offset + len(chunk) - held_back, complete=final and held_back == 0)

    # -- status ---------------------------------------------------------------------------

    def _status(self, name: str) -> JobStatus:
        if not self._valid(name):
            return JobStatus(JobPhase.LOST, message=f"{name!r} is not a Kubernetes object name")
        found = self._get(name)
        cancelled = self._cancelled(name)
        if found is None:
            if not cancelled:
                return JobStatus(JobPhase.LOST, message=f"no job {'/'.join(self._split(name))} in the cluster")
            # Background deletion: the pods are removed after their Job; the devices are free
            # only once none is left.
            left = [p for p in self._pods(name) if not _pod_ended(p)]
            if left:
                return JobStatus(JobPhase.RUNNING, message=f"cancelling: {len(left)} pod(s) still terminating")
            return JobStatus(JobPhase.CANCELLED, message="cancelled")
        kind, obj = found
        if cancelled:
            if not (obj.get("metadata") or {}).get("deletionTimestamp"):
                self._delete(kind, name)  # the cancel's delete did not get through
            return JobStatus(JobPhase.RUNNING, message="cancelling")
        if kind == "job":
            return self._job_status(name, obj)
        if kind == "jobset":
            return self._jobset_status(name, obj)
        if kind == "vcjob":
            return self._volcano_status(name, obj)
        return self._deployment_status(name, obj)

    def _failed(self, name: str, reason: dict | None, stopping: bool) -> JobStatus:
        failures = _failures(_by_rank(self._pods(name)))
        code = next((c for c, _ in failures if c is not None), None)
        parts = [t for _, t in failures]
        if reason and (reason.get("reason") or reason.get("message")):
            parts.append(": ".join(filter(None, (reason.get("reason"), reason.get("message")))))
        message = "; ".join(parts) or "failed"
        if stopping:
            return JobStatus(JobPhase.RUNNING, message=f"stopping the other workers: {message}")
        return JobStatus(JobPhase.FAILED, exit_code=code, message=message)

    def _job_status(self, name: str, job: dict) -> JobStatus:
        status, spec, conditions = job.get("status") or {}, job.get("spec") or {}, _true_conditions(job)
        if "Complete" in conditions:
            return JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        if "Failed" in conditions or "FailureTarget" in conditions:
            # Since 1.31 Failed comes only after every pod has terminated (FailureTarget
            # before); older servers set it at once, so count what is still there as well.
            stopping = "Failed" not in conditions or bool(status.get("active") or status.get("terminating"))
            return self._failed(name, conditions.get("Failed") or conditions.get("FailureTarget"), stopping)
        if spec.get("suspend"):
            queue = ((job.get("metadata") or {}).get("labels") or {}).get(KUEUE_QUEUE_LABEL)
            return JobStatus(JobPhase.PENDING, message=f"suspended until Kueue admits it (LocalQueue {queue})" if queue else "suspended")
        if "SuccessCriteriaMet" in conditions:
            return JobStatus(JobPhase.RUNNING, message="all workers succeeded; finishing")
        return _progress(_by_rank(self._pods(name)), _size("job", job), "finished")

    def _jobset_status(self, name: str, jobset: dict) -> JobStatus:
        conditions = _true_conditions(jobset)
        if "Completed" in conditions:
            return JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        if "Failed" in conditions:
            return self._failed(name, conditions["Failed"], stopping=False)
        if "Suspended" in conditions:
            return JobStatus(JobPhase.PENDING, message="suspended")
        return _progress(_by_rank(self._pods(name)), _size("jobset", jobset), "finished")

    def _volcano_status(self, name: str, vcjob: dict) -> JobStatus:
        state = (vcjob.get("status") or {}).get("state") or {}
        phase = state.get("phase") or "Pending"
        if phase == "Completed":
            return JobStatus(JobPhase.SUCCEEDED, exit_code=0)
        if phase in _VOLCANO_FAILED:
            return self._failed(name, {"reason": phase, "message": state.get("message", "")}, stopping=False)
        status = _progress(_by_rank(self._pods(name)), _size("vcjob", vcjob), "finished")
        if phase in _VOLCANO_PENDING and status.phase == JobPhase.PENDING:
            return JobStatus(JobPhase.PENDING, message=f"volcano {phase}" + (f": {status.message}" if status.message else ""))
        return status

    def _deployment_status(self, name: str, deployment: dict) -> JobStatus:
        size, available = _size("deployment", deployment), int((deployment.get("status") or {}).get("availableReplicas") or 0)
        if size and available >= size:
            return JobStatus(JobPhase.RUNNING, message=f"serving: {available}/{size} replicas available")
        return _progress(_by_rank(self._pods(name)), size, "replicas exited")

    # -- the API --------------------------------------------------------------------------

    def _client(self) -> SimpleNamespace:
        with self._lock:
            if self._api is None:
                k8s = import_client("backend")
                api = api_client(k8s, self.config)
                self._api = SimpleNamespace(
                    k8s=k8s,
                    batch=k8s.client.BatchV1Api(api),
                    core=k8s.client.CoreV1Api(api),
                    apps=k8s.client.AppsV1Api(api),
                    custom=k8s.client.CustomObjectsApi(api),
                )
            return self._api

    def _call(self, fn, *args, allow: tuple[int, ...] = (404,), **kwargs):
        """The raw response, or None when the API answered with a status in `allow`."""
        api = self._client()
        try:
            return fn(*args, _preload_content=False, _request_timeout=self.timeout_s, **kwargs)
        except api.k8s.ApiException as exc:
            if exc.status in allow:
                return None
            error = KubernetesError if exc.status in (400, 409, 422) else BackendUnavailableError
            raise error(f"kubernetes API {self.where}: {api_error(exc, FORBIDDEN_HINT)}") from exc
        except (api.k8s.HTTPError, OSError) as exc:
            raise BackendUnavailableError(f"kubernetes API {self.where} unreachable: {exc}") from exc

    def _json(self, fn, *args, allow: tuple[int, ...] = (404,), **kwargs) -> dict | None:
        response = self._call(fn, *args, allow=allow, **kwargs)
        if response is None:
            return None
        try:
            return json.loads(response.data)
        except ValueError as exc:
            raise KubernetesError(f"kubernetes API {self.where}: unexpected answer: {exc}") from exc

    def _custom(self, kind: str) -> tuple[str, str, str]:
        group, version, plural, _ = JOBSET_API if kind == "jobset" else VOLCANO_API
        return group, version, plural

    def _create(self, kind: str, body: dict) -> dict | None:
        """The created object, or None when one of that name exists (409 AlreadyExists)."""
        a, ns = self._client(), body["metadata"]["namespace"]
        if kind in ("jobset", "vcjob"):
            group, version, plural = self._custom(kind)
            return self._json(a.custom.create_namespaced_custom_object, group, version, ns, plural, body, allow=(409,))
        create = {
            "job": a.batch.create_namespaced_job,
            "deployment": a.apps.create_namespaced_deployment,
            "service": a.core.create_namespaced_service,
        }
        return self._json(create[kind], ns, body, allow=(409,))

    def _read(self, kind: str, ref: str) -> dict | None:
        a, (ns, name) = self._client(), self._split(ref)
        if kind in ("jobset", "vcjob"):
            group, version, plural = self._custom(kind)
            return self._json(a.custom.get_namespaced_custom_object, group, version, ns, plural, name)
        read = {"job": a.batch.read_namespaced_job, "deployment": a.apps.read_namespaced_deployment}
        return self._json(read[kind], name, ns)

    def _delete(self, kind: str, ref: str) -> None:
        """Delete (404 is fine). Background: the object goes now, its pods right after; the
        API's default for batch/v1 Jobs would orphan the pods and leave them running."""
        a, (ns, name) = self._client(), self._split(ref)
        if kind in ("jobset", "vcjob"):
            group, version, plural = self._custom(kind)
            self._call(a.custom.delete_namespaced_custom_object, group, version, ns, plural, name, propagation_policy="Background")
            return
        delete = {
            "job": a.batch.delete_namespaced_job,
            "deployment": a.apps.delete_namespaced_deployment,
            "service": a.core.delete_namespaced_service,
        }
        self._call(delete[kind], name, ns, propagation_policy="Background")

    def _get(self, name: str) -> tuple[str, dict] | None:
        """The workload named `name`: this mode's kind first, then an inference Deployment."""
        primary = {"jobset": "jobset", "volcano": "vcjob"}.get(self.settings.gang_mode, "job")
        for kind in (primary, "deployment"):
            obj = self._read(kind, name)
            if obj is not None:
                return kind, obj
        return None

    def _pods(self, ref: str) -> list[dict]:
        a, (ns, name) = self._client(), self._split(ref)
        answer = self._json(a.core.list_namespaced_pod, ns, label_selector=f"{LABEL_JOB}={name}")
        return list((answer or {}).get("items") or [])

    def _log_bytes(self, ref: str, pod: str, limit_bytes: int) -> bytes:
        a, ns = self._client(), self._split(ref)[0]
        # 400: the container has not started (or the pod is pending); 404: the pod is gone.
        response = self._call(a.core.read_namespaced_pod_log, pod, ns, container=CONTAINER, limit_bytes=limit_bytes, allow=(400, 404))
        return b"" if response is None else bytes(response.data)

    def _check_owner(self, kind: str, obj: dict, task_id: str, attempt: int) -> None:
        notes = _annotations(obj)
        if notes.get(ANNOTATION_TASK) != task_id or notes.get(ANNOTATION_ATTEMPT) != str(attempt):
            owner = (
                f"task {notes.get(ANNOTATION_TASK)!r} attempt {notes.get(ANNOTATION_ATTEMPT)!r}" if notes.get(ANNOTATION_TASK) else "no hetpool task"
            )
            meta = obj.get("metadata") or {}
            where = f"{meta.get('namespace') or self.namespace}/{meta.get('name')}"
            raise KubernetesError(f"{_KIND_NAMES[kind]} {where} exists but belongs to {owner}, not {task_id!r} attempt {attempt}")

    # -- cancellation markers -----------------------------------------------------------------

    def _marker(self, ref: str) -> Path:
        return self.work_dir / "cancelled" / "/".join(self._split(ref))

    # -- namespaces: a handle's job_id is "<namespace>/<name>" (a bare name: self.namespace) ---------

    def _split(self, ref: str) -> tuple[str, str]:
        ns, _, name = ref.rpartition("/")
        return ns or self.namespace, name

    def _valid(self, ref: str) -> bool:
        return ref.count("/") <= 1 and all(is_k8s_name(part) for part in self._split(ref))

    def _remember(self, ns: str, name: str) -> str:
        """The job_id for `name` in `ns`; in tenant mode the namespace is also kept for `find`."""
        if self.settings.namespace_mode == "single":
            return name
        record = self.work_dir / "namespaces" / name
        if not record.exists():
            record.parent.mkdir(parents=True, exist_ok=True)
            record.write_text(ns)
        return f"{ns}/{name}"

    def _recalled(self, name: str) -> str:
        if self.settings.namespace_mode == "single":
            return name
        try:
            ns = (self.work_dir / "namespaces" / name).read_text().strip()
        except FileNotFoundError:
            return name
        return f"{ns}/{name}" if is_k8s_name(ns) else name

    def _cancelled(self, name: str) -> bool:
        return self._marker(name).exists()

    def _mark_cancelled(self, name: str) -> None:
        path = self._marker(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
