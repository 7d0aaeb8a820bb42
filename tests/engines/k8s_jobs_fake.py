"""A recorded-protocol fake of the Kubernetes API server for the Kubernetes BACKEND's tests:
batch/v1 Jobs, core/v1 Pods (and their logs) and Services, apps/v1 Deployments, and the
JobSet / Volcano custom resources (stored only).

THIS IS NOT A KUBERNETES API SERVER, AND NOTHING RUNS. No kube-apiserver can run on this
project's CI machines (see tests/engines/k8s_fake.py) -- the project's one allowed
exception to testing against the real engine -- so the backend's client calls are tested
against this stand-in. What is real: the REST paths and verbs the official client
uses, bearer-token checks, the response shapes (objects, lists, Status errors with their
reason and message: 404 NotFound, 409 AlreadyExists, 422 Invalid, 400 for a container that
is waiting), the delete propagation rules (batch/v1's REST default orphans a Job's pods), and
the schema: every created Job / Service / Deployment is validated with kubernetes-validate
(1.33, strict) as the API server would refuse it.

What is EMULATION: the Job controller, the scheduler and the kubelet. Pods are created from
the template, "scheduled" onto the fake's nodes by nodeSelector / node affinity / topology
spread / extended-resource capacity (else Pending with the scheduler's Unschedulable message),
and their command is NEVER executed: a tiny interpreter understands `echo` (with $VAR from
the pod's resolved env), `env`, `sleep N` (scaled by `time_scale`), `exit N` and `true`; any
other word "fails" like sh's "not found" (exit 127). An image whose name contains "missing"
never pulls (ImagePullBackOff). Logs are what the echo statements printed, appearing over
(scaled) time. Job status and conditions follow the 1.31+ Job controller (FailureTarget →
other pods deleted → Failed; SuccessCriteriaMet → Complete).
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.engines.k8s_fake import VERSION, BadRequest, label_matcher

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
START_S = 0.05  # pod creation → container running (real seconds)
GRACE_S = 0.3  # deletion → pod gone (real seconds)

# URL resource → (API group, Kind, plural as the API names it in messages, schema-validated?)
RESOURCES = {
    "jobs.batch": ("batch/v1", "Job", "jobs.batch", True),
    "pods": ("v1", "Pod", "pods", False),
    "services": ("v1", "Service", "services", True),
    "deployments.apps": ("apps/v1", "Deployment", "deployments.apps", True),
    "jobsets.jobset.x-k8s.io": ("jobset.x-k8s.io/v1alpha2", "JobSet", "jobsets.jobset.x-k8s.io", False),
    "jobs.batch.volcano.sh": ("batch.volcano.sh/v1alpha1", "Job", "jobs.batch.volcano.sh", False),
}
_ROUTES = [
    (re.compile(r"^/apis/batch/v1/namespaces/([^/]+)/jobs(?:/([^/]+))?$"), "jobs.batch"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/pods(?:/([^/]+))?(/log)?$"), "pods"),
    (re.compile(r"^/api/v1/namespaces/([^/]+)/services(?:/([^/]+))?$"), "services"),
    (re.compile(r"^/apis/apps/v1/namespaces/([^/]+)/deployments(?:/([^/]+))?$"), "deployments.apps"),
    (re.compile(r"^/apis/jobset\.x-k8s\.io/v1alpha2/namespaces/([^/]+)/jobsets(?:/([^/]+))?$"), "jobsets.jobset.x-k8s.io"),
    (re.compile(r"^/apis/batch\.volcano\.sh/v1alpha1/namespaces/([^/]+)/jobs(?:/([^/]+))?$"), "jobs.batch.volcano.sh"),
]
_DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names
    body: dict | None


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, details: dict | None = None) -> None:
        super().__init__(message)
        self.body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}
        if details:
            self.body["details"] = details
        self.code = code


def _now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ----------------------------------------------------------------------------- the interpreter


@dataclass
class Script:
    """What the emulated container does: output at (scaled) times, then an exit (None: never)."""

    events: list[tuple[float, bytes]]
    duration: float
    exit_code: int


def _expand(text: str, env: dict[str, str]) -> list[str]:
    """Words of one statement: quotes, backslashes, $VAR and ${VAR}; no globbing or splitting."""
    words, cur, quote, started, i = [], [], None, False, 0
    while i < len(text):
        c = text[i]
        if quote == "'":
            quote = None if c == "'" else quote
            cur += [] if c == "'" else [c]
        elif c == "\\" and i + 1 < len(text):
            cur.append(text[i + 1])
            i += 1
        elif c in "'\"" and quote in (None, c):
            quote, started = (None if quote else c), True
        elif c == "$" and (m := re.match(r"\$(?:\{(\w+)\}|(\w+))", text[i:])):
            cur.append(env.get(m.group(1) or m.group(2), ""))
            i += len(m.group(0)) - 1
        elif c.isspace() and quote is None:
            if cur or started:
                words.append("".join(cur))
            cur, started = [], False
        else:
            cur.append(c)
        i += 1
    if cur or started:
        words.append("".join(cur))
    return words


def _statements(command: str) -> list[str]:
    out, cur, quote = [], [], None
    for c in command:
        if c in "'\"":
            quote = None if quote == c else (quote or c)
        if quote is None and c in ";\n":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    return [s.strip() for s in [*out, "".join(cur)] if s.strip()]


def interpret(command: str, env: dict[str, str], time_scale: float) -> Script:
    """EMULATION of `/bin/sh -c command` for echo / env / sleep / exit / true only."""
    t, status, events = 0.0, 0, []
    for statement in _statements(command.replace("&&", ";")):
        # Both streams go to the container log, as `kubectl logs` shows them.
        words = [w for w in _expand(statement, env) if not re.fullmatch(r"\d?>&\d", w)]
        if not words:
            continue
        cmd, args = words[0], words[1:]
        status = 0
        if cmd == "echo":
            newline = not (args and args[0] == "-n")
            events.append((t, (" ".join(args[0 if newline else 1 :]) + ("\n" if newline else "")).encode()))
        elif cmd == "env":
            events.append((t, "".join(f"{k}={v}\n" for k, v in env.items()).encode()))
        elif cmd == "sleep":
            t += float(args[0]) * time_scale
        elif cmd == "exit":
            return Script(events, t, int(args[0]) if args else 0)
        elif cmd not in ("true", ":"):
            events.append((t, f"/bin/sh: 1: {cmd}: not found\n".encode()))
            status = 127
    return Script(events, t, status)


@dataclass
class _Run:
    """One emulated container: when it started and what its script does."""

    started: float
    script: Script
    started_iso: str = field(default_factory=_now_iso)

    def output(self, now: float) -> bytes:
        return b"".join(data for at, data in self.script.events if self.started + at <= now)

    def ended(self, now: float) -> bool:
        return now >= self.started + self.script.duration


# ----------------------------------------------------------------------------- the fake


class FakeJobsAPI:
    """Serves the backend's resources on 127.0.0.1:<free port> in a thread (see the docstring)."""

    def __init__(
        self,
        *,
        token: str | None = "test-token",
        nodes: dict[str, dict[str, int]] | None = None,
        namespaces: tuple[str, ...] = ("hetpool",),
        time_scale: float = 0.25,
        validate: bool = True,
    ) -> None:
        # node name → extended-resource capacity (nodes carry kubernetes.io/hostname = name)
        self.nodes = nodes if nodes is not None else {n: {"nvidia.com/gpu": 8} for n in ("node-a", "node-b", "node-c")}
        self.token, self.namespaces, self.time_scale, self.validate = token, set(namespaces), time_scale, validate
        self.requests: list[Recorded] = []
        self.store: dict[str, dict[tuple[str, str], dict]] = {r: {} for r in RESOURCES}
        self.runs: dict[tuple[str, str], _Run] = {}
        self._gone_at: dict[tuple[str, str], float] = {}  # pods being deleted → when they disappear
        self._emulated: set[tuple[str, str]] = set()  # pods the emulated controllers made (not `put` ones)
        self._version = itertools.count(1000)
        self._lock = threading.RLock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-jobs-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeJobsAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- helpers for tests ------------------------------------------------------------------

    def get(self, resource: str, name: str, namespace: str = "hetpool") -> dict | None:
        with self._lock:
            self._advance()
            return copy.deepcopy(self.store[resource].get((namespace, name)))

    def items(self, resource: str) -> list[dict]:
        with self._lock:
            self._advance()
            return copy.deepcopy(list(self.store[resource].values()))

    def put(self, resource: str, obj: dict) -> None:
        """Store an object as a controller would have written it (e.g. a JobSet's status, a pod)."""
        with self._lock:
            meta = obj.setdefault("metadata", {})
            meta.setdefault("namespace", "hetpool")
            meta.setdefault("creationTimestamp", _now_iso())
            self.store[resource][(meta["namespace"], meta["name"])] = obj

    def resume(self, name: str, namespace: str = "hetpool") -> None:
        """What Kueue does on admission: unsuspend the Job (the fake then starts its pods)."""
        with self._lock:
            job = self.store["jobs.batch"][(namespace, name)]
            job["spec"]["suspend"] = False
            job["status"]["conditions"] = [dict(c, status="False", reason="JobResumed") for c in job["status"].get("conditions", [])]
            self._start_job(job)

    def calls(self, method: str | None = None) -> list[Recorded]:
        return [r for r in self.requests if method is None or r.method == method]

    # -- request handling ---------------------------------------------------------------------

    def _respond(self, method: str, path: str, query: dict[str, str], headers: dict[str, str], body: dict | None) -> tuple[int, object]:
        with self._lock:
            self.requests.append(Recorded(method, path, query, headers, body))
            if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
                return 401, ApiError(401, "Unauthorized", "Unauthorized").body
            if path in ("/version", "/version/"):
                return 200, VERSION
            route = next(((m, r) for p, r in _ROUTES if (m := p.match(path))), None)
            if route is None:
                return 404, ApiError(404, "NotFound", "the server could not find the requested resource").body
            match, resource = route
            namespace, name = match.group(1), match.group(2)
            try:
                self._advance()
                if resource == "pods" and match.group(3):
                    return 200, self._log(namespace, name, query)
                if method == "POST" and name is None:
                    return 201, self._create(resource, namespace, body or {})
                if method == "GET" and name is None:
                    return 200, self._list(resource, namespace, query)
                if method == "GET":
                    return 200, self._object(resource, namespace, name)
                if method == "DELETE" and name is not None:
                    return 200, self._delete(resource, namespace, name, query.get("propagationPolicy") or (body or {}).get("propagationPolicy"))
                return 405, ApiError(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource: {method}").body
            except ApiError as exc:
                return exc.code, exc.body
            except BadRequest as exc:
                return 400, ApiError(400, "BadRequest", str(exc)).body

    def _missing(self, resource: str, name: str) -> ApiError:
        group = resource.split(".", 1)[1] if "." in resource else ""
        return ApiError(404, "NotFound", f'{resource} "{name}" not found', {"name": name, "group": group, "kind": resource.split(".")[0]})

    def _object(self, resource: str, namespace: str, name: str) -> dict:
        obj = self.store[resource].get((namespace, name))
        if obj is None:
            raise self._missing(resource, name)
        return obj

    def _list(self, resource: str, namespace: str, query: dict[str, str]) -> dict:
        matches = label_matcher(query.get("labelSelector", ""))
        items = [
            {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
            for (ns, _), o in sorted(self.store[resource].items())
            if ns == namespace and matches(o["metadata"].get("labels") or {})
        ]
        api_version, kind, _, _ = RESOURCES[resource]
        return {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": str(next(self._version))}, "items": items}

    def _create(self, resource: str, namespace: str, body: dict) -> dict:
        api_version, kind, plural, schema = RESOURCES[resource]
        meta = body.get("metadata") or {}
        name = meta.get("name", "")
        if namespace not in self.namespaces:
            raise ApiError(404, "NotFound", f'namespaces "{namespace}" not found', {"name": namespace, "kind": "namespaces"})
        if meta.get("namespace") not in (None, namespace):
            raise BadRequest("the namespace of the provided object does not match the namespace sent on the request")
        if body.get("apiVersion") != api_version or body.get("kind") != kind:
            raise BadRequest(f"the API version in the data ({body.get('apiVersion')}) does not match the expected API version ({api_version})")
        self._validate(kind, plural, name, body, schema)
        if (namespace, name) in self.store[resource]:
            group = resource.split(".", 1)[1] if "." in resource else ""
            raise ApiError(409, "AlreadyExists", f'{plural} "{name}" already exists', {"name": name, "group": group, "kind": resource.split(".")[0]})
        obj = copy.deepcopy(body)
        obj["metadata"].update(
            namespace=namespace, uid=str(uuid.uuid4()), resourceVersion=str(next(self._version)), creationTimestamp=_now_iso(), generation=1
        )
        self.store[resource][(namespace, name)] = obj
        if resource == "jobs.batch":
            self._admit_job(obj)
        elif resource == "deployments.apps":
            obj["status"] = {"observedGeneration": 1}
            for _ in range(obj["spec"].get("replicas", 1)):
                self._make_pod(obj, f"{name}-5f7c9d8b4-{uuid.uuid4().hex[:5]}", None)  # (the ReplicaSet between is not emulated)
        return obj

    def _validate(self, kind: str, plural: str, name: str, body: dict, schema: bool) -> None:
        """The API server's checks: the OpenAPI schema (strict, via kubernetes-validate) plus the
        few semantic rules the schema cannot express that a backend could break."""
        problems = []
        if not _DNS1123.match(name) or len(name) > 63:
            problems.append(f"metadata.name: Invalid value: {name!r}: a lowercase RFC 1123 label must consist of lower case alphanumeric characters")
        if schema and self.validate:
            import kubernetes_validate

            try:
                kubernetes_validate.validate(body, "1.33.0", strict=True)
            except kubernetes_validate.ValidationError as exc:
                problems.append(f"{'.'.join(str(p) for p in exc.path)}: {exc.message}")
        if kind == "Job" and plural == "jobs.batch":
            spec = body.get("spec") or {}
            if spec.get("completionMode") == "Indexed" and not spec.get("completions"):
                problems.append("spec.completions: Required value: when completion mode is Indexed")
            if (spec.get("template") or {}).get("spec", {}).get("restartPolicy") not in ("Never", "OnFailure"):
                problems.append('spec.template.spec.restartPolicy: Unsupported value: supported values: "OnFailure", "Never"')
        if kind == "Deployment":
            selector = ((body.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
            labels = body["spec"]["template"]["metadata"].get("labels") or {}
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                problems.append("spec.template.metadata.labels: Invalid value: `selector` does not match template `labels`")
        if problems:
            group = plural.split(".", 1)[1] if "." in plural else ""
            raise ApiError(422, "Invalid", f'{kind}{"." + group if group else ""} "{name}" is invalid: ' + "; ".join(problems))

    def _delete(self, resource: str, namespace: str, name: str, propagation: str | None) -> dict:
        obj = self._object(resource, namespace, name)
        uid = obj["metadata"].get("uid")
        del self.store[resource][(namespace, name)]
        # batch/v1 Jobs deleted through the REST API orphan their pods unless told otherwise
        # (kubectl asks for background); everything else cascades in the background.
        cascade = propagation in ("Background", "Foreground") or (propagation is None and resource != "jobs.batch")
        for key, pod in list(self.store["pods"].items()):
            owned = any(r.get("uid") == uid for r in pod["metadata"].get("ownerReferences") or [])
            if owned and cascade:
                self._terminate(key)
            elif owned:
                pod["metadata"]["ownerReferences"] = []
        for key, svc in list(self.store["services"].items()):
            if any(r.get("uid") == uid for r in svc["metadata"].get("ownerReferences") or []):
                del self.store["services"][key]  # the garbage collector, at once
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": {"name": name, "kind": resource, "uid": uid}}

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> bytes:
        pod = self._object("pods", namespace, name)
        container = query.get("container") or pod["spec"]["containers"][0]["name"]
        if container not in [c["name"] for c in pod["spec"]["containers"]]:
            raise BadRequest(f"container {container} is not valid for pod {name}")
        run = self.runs.get((namespace, name))
        if run is None or time.monotonic() < run.started:
            waiting = ((pod["status"].get("containerStatuses") or [{}])[0].get("state") or {}).get("waiting") or {}
            raise BadRequest(f'container "{container}" in pod "{name}" is waiting to start: {waiting.get("reason", "ContainerCreating")}')
        data = run.output(time.monotonic())
        limit = query.get("limitBytes", "")
        return data[: int(limit)] if limit.isdigit() else data

    # -- emulated controllers ---------------------------------------------------------------------

    def _admit_job(self, job: dict) -> None:
        job["status"] = {}
        if job["spec"].get("suspend"):
            cond = {"type": "Suspended", "status": "True", "reason": "JobSuspended", "message": "Job suspended", "lastTransitionTime": _now_iso()}
            job["status"]["conditions"] = [cond]
            return
        self._start_job(job)

    def _start_job(self, job: dict) -> None:
        job["status"]["startTime"] = _now_iso()
        indexed = job["spec"].get("completionMode") == "Indexed"
        for index in range(job["spec"].get("parallelism", 1)):
            self._make_pod(job, f"{job['metadata']['name']}-{index}-{uuid.uuid4().hex[:5]}", index if indexed else None)

    def _make_pod(self, owner: dict, name: str, index: int | None) -> None:
        meta, template = owner["metadata"], owner["spec"]["template"]
        labels = dict(template["metadata"].get("labels") or {})
        annotations = {}
        if owner["kind"] == "Job":
            uid = meta["uid"]
            labels.update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": meta["name"],
                    "controller-uid": uid,
                    "job-name": meta["name"],
                }
            )
        spec = copy.deepcopy(template["spec"])
        if index is not None:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
            spec["hostname"] = f"{meta['name']}-{index}"
        ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"], "controller": True}
        pod_meta = {"name": name, "namespace": meta["namespace"], "uid": str(uuid.uuid4()), "creationTimestamp": _now_iso()}
        pod_meta.update(labels=labels, annotations=annotations, ownerReferences=[ref])
        self.store["pods"][(meta["namespace"], name)] = {"metadata": pod_meta, "spec": spec, "status": {"phase": "Pending", "qosClass": "Burstable"}}
        self._emulated.add((meta["namespace"], name))

    def _terminate(self, key: tuple[str, str]) -> None:
        pod = self.store["pods"].get(key)
        if pod is not None and "deletionTimestamp" not in pod["metadata"]:
            pod["metadata"]["deletionTimestamp"] = _now_iso()
            pod["metadata"]["deletionGracePeriodSeconds"] = 30
            self._gone_at[key] = time.monotonic() + GRACE_S

    def _fits(self, pod: dict, node: str) -> str:
        """'' when `pod` may run on `node`, else the scheduler's reason."""
        spec, labels = pod["spec"], {"kubernetes.io/hostname": node}
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            return "node(s) didn't match Pod's node affinity/selector"
        terms = ((((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or {}).get(
            "nodeSelectorTerms"
        )
        if terms and not any(_term_matches(t, node, labels) for t in terms):
            return "node(s) didn't match Pod's node affinity/selector"
        for resource, count in _requests(pod).items():
            used = sum(_requests(p).get(resource, 0) for p in self._on_node(node))
            if used + count > self.nodes[node].get(resource, 0):
                return f"Insufficient {resource}"
        return ""

    def _on_node(self, node: str) -> list[dict]:
        return [p for p in self.store["pods"].values() if p["spec"].get("nodeName") == node and p["status"]["phase"] in ("Pending", "Running")]

    def _schedule(self, key: tuple[str, str], pod: dict, now: float) -> None:
        reasons = {n: self._fits(pod, n) for n in sorted(self.nodes)}
        fitting = [n for n, r in reasons.items() if not r]
        for constraint in pod["spec"].get("topologySpreadConstraints") or []:
            fitting = _spread(constraint, fitting, [n for n, r in reasons.items() if "affinity" not in r], self.store["pods"].values())
        if not fitting:
            counts = Counter(r or "node(s) didn't match pod topology spread constraints" for r in reasons.values())
            why = ", ".join(f"{c} {r}" for r, c in sorted(counts.items()))
            total = len(self.nodes)
            message = (
                f"0/{total} nodes are available: {why}. preemption: 0/{total} nodes are available: {total} Preemption is not helpful for scheduling."
            )
            pod["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message, "lastTransitionTime": _now_iso()}
            ]
            return
        node = fitting[0]
        pod["spec"]["nodeName"] = node
        pod["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now_iso()}]
        container = pod["spec"]["containers"][0]
        waiting = {"reason": "ContainerCreating"}
        if "missing" in container["image"]:
            waiting = {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{container["image"]}"'}
        pod["status"]["containerStatuses"] = [
            {"name": container["name"], "image": container["image"], "ready": False, "restartCount": 0, "state": {"waiting": waiting}}
        ]
        if "missing" not in container["image"]:
            self.runs[key] = _Run(now + START_S, interpret(" ".join(container.get("command", [])[2:]), self._env(pod), self.time_scale))

    def _env(self, pod: dict) -> dict[str, str]:
        meta, env = pod["metadata"], {}
        for entry in pod["spec"]["containers"][0].get("env") or []:
            path = ((entry.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath", "")
            if "value" in entry or not path:
                env[entry["name"]] = entry.get("value", "")
            elif m := re.fullmatch(r"metadata\.(annotations|labels)\['([^']+)'\]", path):
                env[entry["name"]] = (meta.get(m.group(1)) or {}).get(m.group(2), "")
            else:
                env[entry["name"]] = {
                    "metadata.name": meta["name"],
                    "metadata.namespace": meta["namespace"],
                    "spec.nodeName": pod["spec"].get("nodeName", ""),
                }.get(path, "")
        if COMPLETION_INDEX in (meta.get("annotations") or {}):
            env["JOB_COMPLETION_INDEX"] = meta["annotations"][COMPLETION_INDEX]
        env["HOSTNAME"] = pod["spec"].get("hostname") or meta["name"]
        return env

    def _advance(self) -> None:
        """Bring every emulated pod and Job up to now (called on each request)."""
        now = time.monotonic()
        for key, gone in list(self._gone_at.items()):
            if now >= gone:
                self.store["pods"].pop(key, None)
                self.runs.pop(key, None)
                self._emulated.discard(key)
                del self._gone_at[key]
        for key, pod in self.store["pods"].items():
            status = pod["status"]
            if status["phase"] in ("Succeeded", "Failed") or key not in self._emulated:
                continue
            if "nodeName" not in pod["spec"]:
                self._schedule(key, pod, now)
            run = self.runs.get(key)
            if run is None or now < run.started:
                continue
            container = status["containerStatuses"][0]
            if run.ended(now) and pod["spec"].get("restartPolicy") != "Always":
                code = run.script.exit_code
                status["phase"] = "Succeeded" if code == 0 else "Failed"
                terminated = {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": run.started_iso,
                    "finishedAt": _now_iso(),
                }
                container.update(ready=False, started=False, state={"terminated": terminated})
            elif status["phase"] == "Pending":
                status.update(phase="Running", startTime=run.started_iso, podIP="10.244.1.17")
                container.update(ready=True, started=True, state={"running": {"startedAt": run.started_iso}})
        for job in self.store["jobs.batch"].values():
            self._job_controller(job)
        for deployment in self.store["deployments.apps"].values():
            pods = [
                p for p in self.store["pods"].values() if (p["metadata"].get("labels") or {}).get("hetpool.io/job") == deployment["metadata"]["name"]
            ]
            ready = sum(p["status"]["phase"] == "Running" for p in pods)
            want = deployment["spec"].get("replicas", 1)
            available = {
                "type": "Available",
                "status": "True" if ready >= want else "False",
                "reason": "MinimumReplicasAvailable" if ready >= want else "MinimumReplicasUnavailable",
            }
            deployment["status"].update(
                replicas=len(pods), updatedReplicas=len(pods), readyReplicas=ready, availableReplicas=ready, conditions=[available]
            )

    def _job_controller(self, job: dict) -> None:
        status, spec = job["status"], job["spec"]
        if spec.get("suspend") or "startTime" not in status:
            return
        uid = job["metadata"]["uid"]
        pods = [(k, p) for k, p in self.store["pods"].items() if (p["metadata"].get("labels") or {}).get("controller-uid") == uid]
        terminating = [p for _, p in pods if "deletionTimestamp" in p["metadata"]]
        live = [(k, p) for k, p in pods if p["status"]["phase"] in ("Pending", "Running") and "deletionTimestamp" not in p["metadata"]]
        done = sorted(int(p["metadata"]["annotations"].get(COMPLETION_INDEX, 0)) for _, p in pods if p["status"]["phase"] == "Succeeded")
        failed = sum(p["status"]["phase"] == "Failed" for _, p in pods)
        status.update(active=len(live), ready=sum(p["status"]["phase"] == "Running" for _, p in live), succeeded=len(done), failed=failed)
        status.update(terminating=len(terminating), uncountedTerminatedPods={})
        if done:
            status["completedIndexes"] = ",".join(str(i) for i in done)
        types = {c["type"] for c in status.get("conditions", [])}
        if failed > spec.get("backoffLimit", 6) and "FailureTarget" not in types:
            self._condition(job, "FailureTarget", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            for key, _ in live:
                self._terminate(key)  # the Job controller stops the rest of the gang
        elif "FailureTarget" in types and "Failed" not in types and not live and not terminating:
            self._condition(job, "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")
        elif len(done) >= spec.get("completions", 1) and "SuccessCriteriaMet" not in types:
            self._condition(job, "SuccessCriteriaMet", "CompletionsReached", "Reached expected number of succeeded pods")
            self._condition(job, "Complete", "CompletionsReached", "Reached expected number of succeeded pods")
            status["completionTime"] = _now_iso()

    @staticmethod
    def _condition(job: dict, kind: str, reason: str, message: str) -> None:
        now = _now_iso()
        cond = {"type": kind, "status": "True", "lastProbeTime": now, "lastTransitionTime": now, "reason": reason, "message": message}
        job["status"].setdefault("conditions", []).append(cond)

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = None
                code, answer = fake._respond(self.command, url.path, query, headers, body)
                data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain" if isinstance(answer, bytes) else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

            def log_message(self, format: str, *args) -> None:  # keep pytest output clean
                pass

        return Handler


def _term_matches(term: dict, node: str, labels: dict[str, str]) -> bool:
    for expr in term.get("matchFields") or []:
        if expr["key"] == "metadata.name" and (node in expr.get("values", [])) != (expr["operator"] == "In"):
            return False
    for expr in term.get("matchExpressions") or []:
        value, op = labels.get(expr["key"]), expr["operator"]
        ok = {"In": value in expr.get("values", []), "NotIn": value not in expr.get("values", []), "Exists": value is not None}.get(op, value is None)
        if not ok:
            return False
    return True


def _requests(pod: dict) -> dict[str, int]:
    limits = ((pod["spec"]["containers"][0].get("resources") or {}).get("limits")) or {}
    return {k: int(v) for k, v in limits.items() if "/" in k}


def _spread(constraint: dict, fitting: list[str], domains: list[str], pods) -> list[str]:
    """Nodes where one more matching pod keeps the skew within maxSkew (topologyKey: the hostname)."""
    selector = (constraint.get("labelSelector") or {}).get("matchLabels") or {}
    counts = dict.fromkeys(domains, 0)
    for pod in pods:
        node = pod["spec"].get("nodeName")
        if node in counts and all((pod["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items()):
            counts[node] += 1
    floor = min(counts.values(), default=0) if len(counts) >= constraint.get("minDomains", 1) else 0
    return [n for n in fitting if counts.get(n, 0) + 1 - floor <= constraint["maxSkew"]]
