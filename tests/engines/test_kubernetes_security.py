"""Kubernetes workloads never run as the control plane (issue 14, finding 1): a namespace per
tenant, pods that PodSecurity "restricted" admits, no service-account token, no host access,
no server environment; settings that would loosen any of it are refused (422 at apply).

Manifests are validated against the official 1.33 schemas (kubernetes-validate, strict); the
client runs against the recorded-protocol fake API (tests/engines/k8s_jobs_fake.py): no
kube-apiserver can run where this project is built, so PodSecurity admission itself is not
exercised here: `restricted_violations` below checks the same fields the standard lists.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import JobPhase, LaunchRequest, WorkerLaunch
from hetpool.engines.kubernetes import KubernetesBackend, ManifestConfig, ManifestError
from hetpool.engines.kubernetes.manifests import (
    inference_manifests,
    job_manifest,
    jobset_manifest,
    tenant_namespace,
    tenant_namespace_manifests,
    volcano_manifest,
)
from tests.engines.contract import wait_phase
from tests.engines.k8s_jobs_fake import FakeJobsAPI

kubernetes_validate = pytest.importorskip("kubernetes_validate")
pytest.importorskip("kubernetes")

CATALOG = DeviceCatalog.builtin()
TOKEN = "test-token"
CANARY = "postgresql://hetpool:canary-secret-7d31@db.internal/hetpool"
NS_A, NS_B = "hetpool-ai-lab--nlp", "hetpool-infra--data"


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, "1.33.0", strict=True)


def worker(rank: int, node: str = "node-a", devices: int = 1) -> WorkerLaunch:
    return WorkerLaunch(rank, node, "gpu", "nvidia-a100-80g", list(range(devices)), "CUDA_VISIBLE_DEVICES", 2.0, 4.0)


def request(tenant: str = "ai-lab/nlp", workers: int = 1, task_id: str = "t-sec", command: str = "id -u; env", **env: str) -> LaunchRequest:
    return LaunchRequest(task_id, 1, "sec", tenant, command, [worker(r) for r in range(workers)], env=dict(env), image="busybox:1.36")


def pod_specs(obj: object) -> list[dict]:
    """Every pod spec inside a manifest (Job, JobSet, Volcano Job, Deployment)."""
    found = []
    if isinstance(obj, dict):
        if "containers" in obj:
            found.append(obj)
        for value in obj.values():
            found += pod_specs(value)
    elif isinstance(obj, list):
        for value in obj:
            found += pod_specs(value)
    return found


def restricted_violations(pod: dict) -> list[str]:
    """The PodSecurity "restricted" (and "baseline") checks that a pod spec can fail."""
    bad = [f"{k} is set" for k in ("hostNetwork", "hostPID", "hostIPC") if pod.get(k)]
    bad += [f"volume {v.get('name')} is not of an allowed type" for v in pod.get("volumes", []) if not ({"configMap", "secret", "emptyDir"} & set(v))]
    if pod.get("automountServiceAccountToken") is not False:
        bad.append("the service-account token is mounted")
    psc = pod.get("securityContext") or {}
    for c in pod["containers"] + pod.get("initContainers", []):
        csc = c.get("securityContext") or {}
        if csc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{c['name']}: allowPrivilegeEscalation is not false")
        if csc.get("privileged"):
            bad.append(f"{c['name']}: privileged")
        if (csc.get("capabilities") or {}).get("drop") != ["ALL"] or (csc.get("capabilities") or {}).get("add"):
            bad.append(f"{c['name']}: capabilities not dropped to none")
        if not (csc.get("runAsNonRoot", psc.get("runAsNonRoot"))):
            bad.append(f"{c['name']}: runAsNonRoot is not true")
        if csc.get("runAsUser", psc.get("runAsUser")) in (0, None):
            bad.append(f"{c['name']}: runs as uid 0 (or the image's user)")
        seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{c['name']}: seccompProfile {seccomp}")
        if c.get("ports") and any(p.get("hostPort") for p in c["ports"]):
            bad.append(f"{c['name']}: hostPort")
    return bad


@pytest.mark.parametrize("mode", ["indexed-job", "jobset", "volcano", "serve"])
def test_every_pod_is_restricted_and_carries_no_server_environment(mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HETPOOL_DATABASE_URL", CANARY)
    cfg = ManifestConfig.from_config({"gang_mode": "jobset" if mode == "jobset" else "volcano" if mode == "volcano" else "indexed-job"})
    req = request(workers=2, GREETING="hi")
    cfg = cfg.for_tenant(req.tenant)
    if mode == "serve":
        objects = inference_manifests(request(workers=2, HETPOOL_SERVE_PORT="8000"), 8000, cfg, CATALOG)
    else:
        objects = [{"indexed-job": job_manifest, "jobset": jobset_manifest, "volcano": volcano_manifest}[mode](req, cfg, CATALOG)]
    pods = pod_specs(objects)
    assert pods
    for pod in pods:
        validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS_A}, "spec": pod})
        assert restricted_violations(pod) == [], pod
        assert pod["securityContext"]["runAsUser"] == 1000 and pod["securityContext"]["runAsGroup"] == 1000
        names = {e["name"] for c in pod["containers"] for e in c["env"]}
        assert names <= {"GREETING", "HETPOOL_SERVE_PORT", "CUDA_VISIBLE_DEVICES"} | {n for n in names if n.startswith("HETPOOL_")}
        assert "HETPOOL_DATABASE_URL" not in names
    text = json.dumps(objects)
    assert CANARY not in text and "hostPath" not in text and '"volumes"' not in text
    assert {o["metadata"]["namespace"] for o in objects} == {NS_A}
    if mode == "indexed-job":
        validate(objects[0])


def test_uid_and_gid_are_configurable_and_never_root() -> None:
    pod = pod_specs(job_manifest(request(), ManifestConfig.from_config({"run_as_user": "2345", "run_as_group": "3456"}), CATALOG))[0]
    assert pod["securityContext"]["runAsUser"] == 2345 and pod["securityContext"]["runAsGroup"] == 3456
    assert ManifestConfig.from_config({"run_as_user": "4000"}).run_as_group == 4000  # the group follows the user
    for bad, match in (
        ({"run_as_user": "0"}, r"run_as_user '0' is refused: pods never run as root"),
        ({"run_as_group": "00"}, r"run_as_group '00' is refused: pods never run as root"),
        ({"run_as_user": "-5"}, "must be a uid/gid between 1 and"),
        ({"host_paths": "/data"}, "host_paths is refused: hetpool mounts no volumes"),
        ({"host_network": "true"}, "host_network is refused"),
        ({"privileged": "false"}, "privileged is refused"),
        ({"automount_service_account_token": "true"}, "never get a service-account token"),
        ({"namespace_mode": "cluster"}, "namespace_mode 'cluster' is not one of tenant, single"),
        ({"tenant_namespaces": "ai-lab=Not_A_Label"}, "tenant_namespaces entry"),
    ):
        with pytest.raises(ManifestError, match=match):
            ManifestConfig.from_config(bad)


def test_tenant_namespaces_are_dns_labels_one_per_tenant() -> None:
    assert tenant_namespace("ai-lab/nlp") == NS_A and tenant_namespace("infra/data") == NS_B
    assert tenant_namespace("ai-lab/nlp", "team-") == "team-ai-lab--nlp"
    # Paths that a naive mapping would merge get different namespaces (hashed where ambiguous).
    pairs = [("a/b", "a--b"), ("a-b/c", "a/b-c"), ("a_b", "a-b"), ("x" * 40 + "/" + "y" * 40, "x" * 40 + "/" + "y" * 39 + "z")]
    for one, other in pairs:
        assert tenant_namespace(one) != tenant_namespace(other), (one, other)
    for tenant in [p for pair in pairs for p in pair] + ["ai-lab/nlp/llm-sft", "o" * 40 + "/" + "t" * 40 + "/" + "p" * 40]:
        name = tenant_namespace(tenant)
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name), name
        assert name == tenant_namespace(tenant)  # deterministic
    explicit = {"ai-lab": "ml", "ai-lab/cv": "vision"}
    assert tenant_namespace("ai-lab/cv/detection", explicit=explicit) == "vision" and tenant_namespace("ai-lab/nlp", explicit=explicit) == "ml"
    single = ManifestConfig.from_config({"namespace": "shared"})
    assert single.namespace_mode == "single" and single.for_tenant("ai-lab/nlp").namespace == "shared"


def test_what_the_cluster_admin_creates_per_tenant_namespace_is_valid() -> None:
    objects = tenant_namespace_manifests(NS_A, "hetpool-backend", "hetpool")
    for obj in objects:
        validate(obj)
    namespace = next(o for o in objects if o["kind"] == "Namespace")
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    binding = next(o for o in objects if o["kind"] == "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hetpool-backend", "namespace": "hetpool"}]
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")
    assert policy["spec"]["ingress"] == [{"from": [{"podSelector": {}}]}]  # only pods of the same namespace


@pytest.fixture
def fake() -> Iterator[FakeJobsAPI]:
    with FakeJobsAPI(token=TOKEN, namespaces=(NS_A, NS_B)) as server:
        yield server


def backend(api: FakeJobsAPI, tmp_path: Path) -> KubernetesBackend:
    return KubernetesBackend({"host": api.url, "token": TOKEN}, CATALOG, tmp_path / "work")


def test_each_tenants_job_lands_in_its_own_namespace(fake: FakeJobsAPI, tmp_path: Path) -> None:
    api = fake
    b = backend(api, tmp_path)
    a = b.submit(request("ai-lab/nlp", task_id="t-a"))
    bb = b.submit(request("infra/data", workers=2, task_id="t-b", command="echo up; sleep 300"))
    assert a.job_id == f"{NS_A}/hetpool-t-a-1" and bb.job_id == f"{NS_B}/hetpool-t-b-1"
    posts = [(c.path, c.body["metadata"]["namespace"]) for c in api.calls("POST")]
    assert posts == [
        (f"/apis/batch/v1/namespaces/{NS_A}/jobs", NS_A),
        (f"/apis/batch/v1/namespaces/{NS_B}/jobs", NS_B),
        (f"/api/v1/namespaces/{NS_B}/services", NS_B),
    ]
    pod = api.get("jobs.batch", "hetpool-t-a-1", NS_A)["spec"]["template"]["spec"]
    assert restricted_violations(pod) == []
    assert wait_phase(b, a, {JobPhase.SUCCEEDED}, 10).exit_code == 0
    before = len(api.requests)
    b.logs(a)
    wait_phase(b, bb, {JobPhase.RUNNING}, 10)
    b.cancel(bb)
    # Reading A and cancelling B touched only A's and B's own namespace, never another.
    for call in api.requests[before:]:
        assert f"/namespaces/{NS_A}/" in call.path or f"/namespaces/{NS_B}/" in call.path
    assert [c.path for c in api.calls("DELETE")] == [f"/apis/batch/v1/namespaces/{NS_B}/jobs/hetpool-t-b-1"]
    assert api.get("jobs.batch", "hetpool-t-a-1", NS_B) is None and api.get("jobs.batch", "hetpool-t-a-1", "hetpool") is None
    # A restarted server (same work dir) finds the job in its tenant's namespace.
    assert backend(api, tmp_path).find("t-a", 1) == a


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"run_as_user": "0"}, "backend_config.run_as_user"),
        ({"host_paths": "/var/lib/data"}, "backend_config.host_paths"),
        ({"namespace_mode": "shared"}, "backend_config.namespace_mode"),
        ({"run_as_user": "²"}, "backend_config.run_as_user"),  # a digit to str.isdigit, not to int()
        ({"tolerations": "[" * 100_000}, "backend_config.tolerations"),  # deeper than the JSON parser goes
    ],
)
def test_unsafe_kubernetes_settings_are_a_422_naming_the_field(api: TestClient, config: dict, field: str) -> None:
    cluster = {"kind": "Cluster", "name": "k8s", "backend": "kubernetes", "backend_config": {"host": "https://10.0.0.1:6443", **config}}
    response = api.post("/api/v1/apply", json={"documents": [cluster]})
    assert response.status_code == 422, response.text
    assert any(field in d["loc"] for d in response.json()["details"]), response.json()
