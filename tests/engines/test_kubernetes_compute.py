"""The Kubernetes backend: manifests validated against the official schemas, the official
client run against a recorded-protocol fake API server, and the shared backend contract.

No kube-apiserver can run on this project's machines. What is really tested here: every
batch/v1, apps/v1, core/v1 and RBAC object the backend builds is validated with
kubernetes-validate (1.33, strict: unknown fields are errors); the JobSet / Volcano custom
resources (no schemas in kubernetes-validate) are checked structurally and their embedded
job / pod templates validated against the core schemas; and the client's requests (paths,
verbs, token, namespace, delete propagation, 409 handling) go over HTTP to
tests/engines/k8s_jobs_fake.py, which answers in the API's shapes. The fake's job
lifecycle (scheduling, running the command, logs) is EMULATION; see its docstring.
"""

from __future__ import annotations

import copy
import dataclasses
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import BackendUnavailableError
from hetpool.engines.base import JobHandle, JobPhase, LaunchRequest, WorkerLaunch, capabilities
from hetpool.engines.kubernetes import KubernetesBackend, KubernetesError, ManifestConfig, ManifestError, rbac_manifests
from hetpool.engines.kubernetes.manifests import (
    RBAC_RULES,
    headless_service,
    inference_manifests,
    job_manifest,
    jobset_manifest,
    k8s_name,
    label_value,
    volcano_manifest,
)
from hetpool.engines.registry import make_backend
from tests.engines.contract import wait_phase
from tests.engines.k8s_jobs_fake import FakeJobsAPI, interpret

kubernetes_validate = pytest.importorskip("kubernetes_validate")
pytest.importorskip("kubernetes")

K8S_VERSION = "1.33.0"
TOKEN = "test-token"
CATALOG = DeviceCatalog.builtin()
DOCS = Path(__file__).resolve().parents[2] / "docs" / "backends.md"
VENDOR_MODELS = {m.k8s_resource: m for m in CATALOG.all() if "/" in m.k8s_resource}  # one model per extended resource


def validate(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def worker(
    rank: int, node: str = "node-a", model: str | None = "nvidia-a100-80g", devices: int = 2, env: str = "CUDA_VISIBLE_DEVICES", **kw
) -> WorkerLaunch:
    indices = list(range(rank * devices, rank * devices + devices))
    return WorkerLaunch(rank, node, kw.get("pool", "gpu"), model, indices, env if devices else "", kw.get("cpu", 8.0), kw.get("memory_gb", 64.0))


def request(workers: list[WorkerLaunch] | None = None, command: str = "echo hi", task_id: str = "t-abc", **kw) -> LaunchRequest:
    return LaunchRequest(
        task_id, kw.get("attempt", 1), "train llama", "org/team", command, workers or [worker(0)], kw.get("env", {}), kw.get("image", "")
    )


def config(**kw: str) -> ManifestConfig:
    # One namespace for every tenant (the layout these tests were written for); per-tenant
    # namespaces: tests/engines/test_kubernetes_security.py.
    return ManifestConfig.from_config({"image_default": "registry.local/train:1", "namespace_mode": "single", **kw})


def pod_spec(job: dict) -> dict:
    return job["spec"]["template"]["spec"]


def env_of(container: dict) -> dict:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


# ------------------------------------------------------------------ manifests (pure, schema-validated)


@pytest.mark.parametrize("resource", sorted(VENDOR_MODELS))
def test_every_vendor_resource_makes_a_valid_job(resource: str) -> None:
    model = VENDOR_MODELS[resource]
    req = request([worker(0, model=model.name, env=model.visible_devices_env)])
    job = job_manifest(req, config(), CATALOG)
    validate(job)
    container = pod_spec(job)["containers"][0]
    assert container["resources"]["limits"] == {resource: "2"}
    assert container["resources"]["requests"] == {"cpu": "8", "memory": "65536Mi"}
    assert {"key": resource, "operator": "Exists", "effect": "NoSchedule"} in pod_spec(job)["tolerations"]
    env = env_of(container)
    if model.visible_devices_env:
        assert env[model.visible_devices_env] == "0,1"  # container-local: the device plugin picked the devices
    assert env["HETPOOL_DEVICE_INDICES"] == "0,1" and env["HETPOOL_PLACED_DEVICE_INDICES"] == "0,1"
    assert container["command"] == ["/bin/sh", "-c", "echo hi"] and container["image"] == "registry.local/train:1"


def test_the_vendors_resource_names() -> None:
    assert {"nvidia.com/gpu", "huawei.com/Ascend910", "huawei.com/Ascend310P", "amd.com/gpu", "cambricon.com/mlu", "hygon.com/dcunum"} <= set(
        VENDOR_MODELS
    )
    assert "kunlunxin.com/xpu" in VENDOR_MODELS


def test_resource_models_override_and_unknown_models() -> None:
    cfg = config(resource_models="huawei.com/Ascend910B3=ascend-910b3,cambricon.com/mlu370=unknown-cambricon-mlu370")
    job = job_manifest(request([worker(0, model="ascend-910b3", env="ASCEND_RT_VISIBLE_DEVICES")]), cfg, CATALOG)
    validate(job)
    assert pod_spec(job)["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910B3": "2"}
    job = job_manifest(request([worker(0, model="unknown-cambricon-mlu370", env="MLU_VISIBLE_DEVICES")]), cfg, CATALOG)
    assert pod_spec(job)["containers"][0]["resources"]["limits"] == {"cambricon.com/mlu370": "2"}
    with pytest.raises(ManifestError, match="has no Kubernetes resource name.*resource_models"):
        job_manifest(request([worker(0, model="unknown-metax-c500")]), config(), CATALOG)
    json_cfg = config(resource_models='{"nvidia.com/mig-1g.10gb": "unknown-nvidia-a100-80g-mig-1g-10gb"}')
    job = job_manifest(request([worker(0, model="unknown-nvidia-a100-80g-mig-1g-10gb", devices=1)]), json_cfg, CATALOG)
    assert pod_spec(job)["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "1"}


def test_cpu_only_workers_request_no_devices() -> None:
    for w in (worker(0, model=None, devices=0, cpu=1.5, memory_gb=0.5), worker(0, model="cpu-x86-64", env="")):
        job = job_manifest(request([w]), config(), CATALOG)
        validate(job)
        container = pod_spec(job)["containers"][0]
        assert "limits" not in container.get("resources", {}) and "tolerations" not in pod_spec(job)
    assert pod_spec(job_manifest(request([worker(0, model=None, devices=0, cpu=1.5, memory_gb=0.5)]), config(), CATALOG))["containers"][0][
        "resources"
    ] == {"requests": {"cpu": "1500m", "memory": "512Mi"}}


def test_single_worker_job_shape() -> None:
    cfg = config(priority_class="hetpool-batch", service_account="trainer", tolerations='[{"key": "dedicated", "operator": "Equal", "value": "ai"}]')
    job = job_manifest(request(env={"GREETING": "hi"}), cfg, CATALOG)
    validate(job)
    meta, spec, pod = job["metadata"], job["spec"], pod_spec(job)
    assert meta["name"] == "hetpool-t-abc-1" and meta["namespace"] == "hetpool"
    assert (
        meta["labels"].items()
        >= {"hetpool.io/task-id": "t-abc", "hetpool.io/attempt": "1", "hetpool.io/tenant": "org_team", "hetpool.io/job": "hetpool-t-abc-1"}.items()
    )
    assert meta["annotations"]["hetpool.io/tenant"] == "org/team" and meta["annotations"]["hetpool.io/task-name"] == "train llama"
    assert (
        spec.items()
        >= {"completionMode": "Indexed", "completions": 1, "parallelism": 1, "backoffLimit": 0, "ttlSecondsAfterFinished": 604800}.items()
    )
    assert "suspend" not in spec and "subdomain" not in pod
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "node-a"} and pod["restartPolicy"] == "Never"
    assert pod["priorityClassName"] == "hetpool-batch" and pod["serviceAccountName"] == "trainer"
    assert {"key": "dedicated", "operator": "Equal", "value": "ai"} in pod["tolerations"]
    env = env_of(pod["containers"][0])
    assert env["GREETING"] == "hi" and env["HETPOOL_TASK_ID"] == "t-abc" and env["HETPOOL_WORLD_SIZE"] == "1"
    assert env["HETPOOL_WORKER_RANK"] == {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["HETPOOL_NODE"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}


def test_gang_on_one_node_uses_a_node_selector() -> None:
    job = job_manifest(request([worker(0), worker(1)]), config(), CATALOG)
    validate(job)
    assert job["spec"]["completions"] == job["spec"]["parallelism"] == 2
    pod = pod_spec(job)
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "node-a"} and pod["subdomain"] == "hetpool-t-abc-1"
    assert env_of(pod["containers"][0])["HETPOOL_MASTER_ADDR"] == "hetpool-t-abc-1-0.hetpool-t-abc-1"
    assert "HETPOOL_PLACED_DEVICE_INDICES" not in env_of(pod["containers"][0])  # ranks hold different devices: no one value
    service = headless_service(
        "hetpool-t-abc-1", config(), owner={**job, "metadata": {**job["metadata"], "uid": "0b6c3b5e-1d2f-4c3a-9e7a-5d1c2b3a4f50"}}
    )
    validate(service)
    assert service["spec"]["clusterIP"] == "None" and service["metadata"]["ownerReferences"][0]["kind"] == "Job"


def test_gang_over_nodes_pins_the_node_set_and_spreads_evenly() -> None:
    workers = [worker(0, "node-a"), worker(1, "node-b"), worker(2, "node-a"), worker(3, "node-b")]
    job = job_manifest(request(workers), config(), CATALOG)
    validate(job)
    pod = pod_spec(job)
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term == [{"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-a", "node-b"]}]}]
    spread = pod["topologySpreadConstraints"][0]
    assert spread.items() >= {"maxSkew": 1, "minDomains": 2, "whenUnsatisfiable": "DoNotSchedule", "topologyKey": "kubernetes.io/hostname"}.items()
    by_name = job_manifest(request(workers), config(node_selector_label="metadata.name"), CATALOG)
    validate(by_name)
    terms = pod_spec(by_name)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a", "node-b"]}]}]


def test_placements_one_template_cannot_express_are_refused_with_a_way_out() -> None:
    uneven = [worker(0, "node-a"), worker(1, "node-a"), worker(2, "node-b")]
    with pytest.raises(ManifestError, match=r"workers per node differ \(node-a: 2, node-b: 1\).*jobset or volcano"):
        job_manifest(request(uneven), config(), CATALOG)
    mixed = [worker(0, "node-a"), worker(1, "node-b", model="nvidia-h100")]
    with pytest.raises(ManifestError, match="differ in model.*jobset or volcano"):
        job_manifest(request(mixed), config(), CATALOG)
    for build in (jobset_manifest, volcano_manifest):  # the per-rank modes take both
        assert build(request(uneven), config(), CATALOG) and build(request(mixed), config(), CATALOG)
    with pytest.raises(ManifestError, match="no container image"):
        job_manifest(request(), ManifestConfig.from_config({}), CATALOG)
    with pytest.raises(ManifestError, match="ranks must be 0..1"):
        job_manifest(request([worker(0), worker(2)]), config(), CATALOG)


def test_kueue_mode_queues_a_suspended_job() -> None:
    job = job_manifest(request([worker(0), worker(1, "node-b")]), config(gang_mode="kueue", kueue_queue="team-a"), CATALOG)
    validate(job)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" and job["spec"]["suspend"] is True
    with pytest.raises(ManifestError, match="kueue_queue"):
        config(gang_mode="kueue")


def test_bad_backend_config_is_refused() -> None:
    for bad, match in (
        ({"gang_mode": "mpi"}, "gang_mode"),
        ({"namespace": "Team_A"}, "namespace"),
        ({"tolerations": "[1]"}, "tolerations"),
        ({"tolerations": "{"}, "not JSON"),
        ({"resource_models": "nvidia.com/gpu"}, "key=model"),
        ({"ttl_after_finished_s": "soon"}, "ttl_after_finished_s"),
    ):
        with pytest.raises(ManifestError, match=match):
            ManifestConfig.from_config(bad)
    assert ManifestConfig.from_config({"ttl_after_finished_s": ""}).ttl_after_finished_s is None


def _check_custom_resource(obj: dict, group_version: str, kind: str, spec_keys: set[str]) -> None:
    """Structural check of a custom resource (kubernetes-validate ships no CRD schemas)."""
    assert obj["apiVersion"] == group_version and obj["kind"] == kind
    assert set(obj) == {"apiVersion", "kind", "metadata", "spec"} and set(obj["spec"]) <= spec_keys
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", obj["metadata"]["name"]) and len(obj["metadata"]["name"]) <= 63
    validate({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]})  # labels / annotations are valid ObjectMeta


def test_jobset_manifest_one_replicated_job_per_rank() -> None:
    workers = [worker(0, "node-a"), worker(1, "node-a"), worker(2, "node-b", devices=1)]
    jobset = jobset_manifest(request(workers), config(priority_class="high"), CATALOG)
    spec_keys = {"replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy", "suspend", "ttlSecondsAfterFinished", "managedBy"}
    _check_custom_resource(jobset, "jobset.x-k8s.io/v1alpha2", "JobSet", spec_keys)
    assert jobset["spec"]["failurePolicy"] == {"maxRestarts": 0} and jobset["spec"]["network"]["subdomain"] == "hetpool-t-abc-1"
    for rank, rjob in enumerate(jobset["spec"]["replicatedJobs"]):
        assert set(rjob) == {"name", "replicas", "template"} and rjob["name"] == f"r{rank}" and rjob["replicas"] == 1
        # The embedded template is a batch/v1 JobTemplateSpec: validate it as a Job.
        validate(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"x-{rank}", **rjob["template"]["metadata"]},
                "spec": rjob["template"]["spec"],
            }
        )
        pod = rjob["template"]["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"kubernetes.io/hostname": workers[rank].node}
        env = env_of(pod["containers"][0])
        assert env["HETPOOL_WORKER_RANK"] == str(rank) and env["HETPOOL_NODE"] == workers[rank].node
        assert env["HETPOOL_PLACED_DEVICE_INDICES"] == ",".join(map(str, workers[rank].device_indices))
        assert env["HETPOOL_MASTER_ADDR"] == "hetpool-t-abc-1-r0-0-0.hetpool-t-abc-1"
        assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": str(len(workers[rank].device_indices))}


def test_volcano_manifest_is_a_gang_of_per_rank_tasks() -> None:
    workers = [
        worker(0, "node-a", model="ascend-910b3", env="ASCEND_RT_VISIBLE_DEVICES"),
        worker(1, "node-b", model="ascend-910b3", env="ASCEND_RT_VISIBLE_DEVICES"),
    ]
    vcjob = volcano_manifest(request(workers), config(volcano_queue="research", priority_class="high"), CATALOG)
    spec_keys = {"schedulerName", "minAvailable", "queue", "policies", "plugins", "tasks", "priorityClassName", "ttlSecondsAfterFinished", "maxRetry"}
    _check_custom_resource(vcjob, "batch.volcano.sh/v1alpha1", "Job", spec_keys)
    spec = vcjob["spec"]
    assert (
        spec["minAvailable"] == 2 and spec["queue"] == "research" and spec["schedulerName"] == "volcano" and spec["plugins"] == {"svc": [], "env": []}
    )
    for rank, task in enumerate(spec["tasks"]):
        assert set(task) == {"name", "replicas", "template"}
        validate({"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": f"x-{rank}"}, "template": task["template"]})  # a PodTemplateSpec
        pod = task["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"] == {"huawei.com/Ascend910": "2"}
        assert env_of(pod["containers"][0])["HETPOOL_MASTER_ADDR"] == "hetpool-t-abc-1-r0-0.hetpool-t-abc-1"


def test_inference_manifests_deployment_and_service() -> None:
    req = request([worker(0, "node-a", devices=1), worker(1, "node-b", devices=1)], command="python -m server", env={"HETPOOL_SERVE_PORT": "8000"})
    deployment, service = inference_manifests(req, 8000, config(), CATALOG)
    validate(deployment)
    validate(service)
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 2 and pod["restartPolicy"] == "Always"
    assert pod["containers"][0]["ports"] == [{"name": "serve", "containerPort": 8000, "protocol": "TCP"}]
    assert "HETPOOL_WORKER_RANK" not in env_of(pod["containers"][0]) and env_of(pod["containers"][0])["HETPOOL_SERVE_PORT"] == "8000"
    assert service["spec"]["ports"][0]["port"] == 8000 and service["spec"]["selector"] == {"hetpool.io/job": "hetpool-t-abc-1"}


def test_names_are_dns_labels_and_deterministic() -> None:
    assert k8s_name("hetpool-t-abc-1") == "hetpool-t-abc-1"  # readable when already valid
    odd = k8s_name("hetpool-Task_01-1")
    assert re.fullmatch(r"hetpool-task-01-1-[0-9a-f]{8}", odd) and odd == k8s_name("hetpool-Task_01-1")
    assert k8s_name("hetpool-task_01-1") != k8s_name("hetpool-task-01-1")  # sanitising never merges two ids
    long = k8s_name("hetpool-" + "x" * 200 + "-3")
    assert len(long) <= 50 and long[0].isalpha() and long[-1].isalnum()
    assert k8s_name("9lives") == "h-9lives-" + k8s_name("9lives")[-8:]
    assert label_value("org/team") == "org_team"
    assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?", label_value("-x/" * 40))
    job = job_manifest(request(task_id="Σ-weird task/" + "y" * 80), config(), CATALOG)
    validate(job)


def test_rbac_example_is_valid_and_is_the_one_in_the_docs() -> None:
    objects = rbac_manifests("hetpool", "hetpool-backend")
    for obj in objects:
        validate(obj)
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(r"<!-- rbac -->\s*```yaml\n(.*?)```", text, re.DOTALL)
    assert block, "docs/backends.md lost the Kubernetes RBAC block"
    assert list(yaml.safe_load_all(block.group(1))) == objects


# ------------------------------------------------------------------ the client against the fake


@pytest.fixture
def api() -> Iterator[FakeJobsAPI]:
    with FakeJobsAPI(token=TOKEN) as fake:
        yield fake


def backend_for(api: FakeJobsAPI, tmp_path: Path, **cfg: str) -> KubernetesBackend:
    config = {"host": api.url, "token": TOKEN, "image_default": "busybox:1.36", "namespace_mode": "single", **cfg}
    return KubernetesBackend(config, CATALOG, tmp_path / "work")


def until(backend: KubernetesBackend, handle: JobHandle, *phases: JobPhase, timeout: float = 10.0):
    return wait_phase(backend, handle, set(phases), timeout)


def test_kind_capabilities_and_registry(tmp_path: Path) -> None:
    assert KubernetesBackend.kind == "kubernetes"
    assert capabilities(KubernetesBackend) == {"gang": True, "log-streaming": True, "fractional-devices": False}
    built = make_backend("kubernetes", {"host": "https://10.0.0.1:6443", "namespace": "team-a"}, CATALOG, tmp_path)
    assert isinstance(built, KubernetesBackend) and built.namespace == "team-a"


def test_submit_sends_the_manifest_with_the_token(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    req = request([worker(0), worker(1)], command="echo ok")
    handle = backend.submit(req)
    assert handle == JobHandle("kubernetes", "hetpool-t-abc-1")
    posts = api.calls("POST")
    assert [p.path for p in posts] == ["/apis/batch/v1/namespaces/hetpool/jobs", "/api/v1/namespaces/hetpool/services"]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in api.requests)
    sent = posts[0].body
    expected = job_manifest(req, ManifestConfig.from_config({"image_default": "busybox:1.36", "namespace_mode": "single"}), CATALOG)
    assert sent == expected
    owner = posts[1].body["metadata"]["ownerReferences"][0]
    assert owner["uid"] == api.get("jobs.batch", "hetpool-t-abc-1")["metadata"]["uid"]  # the Service goes with the Job
    assert until(backend, handle, JobPhase.SUCCEEDED).exit_code == 0


def test_409_adopts_the_existing_job_and_refuses_a_stranger(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    req = request()
    first = backend.submit(req)
    assert backend_for(api, tmp_path).submit(req) == first
    assert len(api.store["jobs.batch"]) == 1 and len(api.store["pods"]) == 1
    stranger = copy.deepcopy(api.get("jobs.batch", "hetpool-t-abc-1"))
    stranger["metadata"]["annotations"]["hetpool.io/task-id"] = "someone-else"
    api.put("jobs.batch", stranger)
    with pytest.raises(KubernetesError, match="belongs to task 'someone-else'"):
        backend.submit(req)
    assert backend.find("t-abc", 1) is None


def test_cancel_deletes_in_the_background_and_is_idempotent(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    handle = backend.submit(request([worker(0), worker(1, "node-b")], command="echo up; sleep 300"))
    until(backend, handle, JobPhase.RUNNING)
    backend.cancel(handle)
    deletes = api.calls("DELETE")
    assert [(d.path, d.query) for d in deletes] == [("/apis/batch/v1/namespaces/hetpool/jobs/hetpool-t-abc-1", {"propagationPolicy": "Background"})]
    assert api.get("services", "hetpool-t-abc-1") is None  # garbage-collected through its owner
    status = backend.poll([handle])[handle.job_id]
    assert status.phase == JobPhase.RUNNING and "terminating" in status.message  # the pods are still going
    assert until(backend, handle, JobPhase.CANCELLED).message == "cancelled"
    assert api.items("pods") == []
    backend.cancel(handle)
    assert len(api.calls("DELETE")) == 1
    assert backend.submit(request([worker(0), worker(1, "node-b")])) == handle and api.get("jobs.batch", handle.job_id) is None  # never restarted


def test_cancelling_a_finished_job_keeps_it(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    handle = backend.submit(request(command="echo done"))
    until(backend, handle, JobPhase.SUCCEEDED)
    backend.cancel(handle)
    assert api.calls("DELETE") == [] and backend.poll([handle])[handle.job_id].phase == JobPhase.SUCCEEDED
    assert backend.logs(handle).text == "done\n"


def test_gang_failure_reports_the_failed_rank(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    handle = backend.submit(request([worker(0), worker(1, "node-b")], command='echo "rank $HETPOOL_WORKER_RANK"; sleep 300'))
    until(backend, handle, JobPhase.RUNNING)
    pods = sorted(api.items("pods"), key=lambda p: p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"])
    run = api.runs[("hetpool", pods[1]["metadata"]["name"])]
    run.script = interpret("echo failing; exit 4", {}, api.time_scale)  # the emulator has no `if`: rank 1's outcome is scripted
    status = until(backend, handle, JobPhase.FAILED)
    assert status.exit_code == 4 and "worker rank 1 exited with code 4" in status.message and "BackoffLimitExceeded" in status.message
    assert [p["metadata"]["name"] for p in api.items("pods")] == [pods[1]["metadata"]["name"]]  # the Job controller stopped rank 0


def test_unschedulable_and_image_pull_problems_are_pending_with_the_reason(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    lost = backend.submit(request([worker(0, "node-z")], task_id="t-nowhere"))
    status = until(backend, lost, JobPhase.PENDING)
    assert "Unschedulable" in status.message and "didn't match Pod's node affinity/selector" in status.message
    full = backend.submit(request([worker(0, devices=16)], task_id="t-big"))
    assert "Insufficient nvidia.com/gpu" in until(backend, full, JobPhase.PENDING).message
    pull = backend.submit(request(task_id="t-pull", image="registry.local/missing:1"))
    wait_phase(backend, pull, {JobPhase.PENDING}, 5)
    status = backend.poll([pull])[pull.job_id]
    assert status.phase == JobPhase.PENDING and "ImagePullBackOff" in status.message
    chunk = backend.logs(pull)
    assert chunk.text == "" and not chunk.complete  # 400 "waiting to start" is no error


def test_logs_slice_bytes_and_keep_characters_whole(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    handle = backend.submit(request(command='echo "héllo 异构算力"; echo second'))
    until(backend, handle, JobPhase.SUCCEEDED)
    expected = "héllo 异构算力\nsecond\n"
    pieces, offset = [], 0
    for _ in range(100):
        chunk = backend.logs(handle, offset=offset, limit=5)
        pieces.append(chunk.text)
        offset = chunk.offset
        if chunk.complete:
            break
    assert "".join(pieces) == expected and offset == len(expected.encode())
    logs = [r for r in api.requests if r.path.endswith("/log")]
    assert logs[0].query == {"container": "worker", "limitBytes": "5"} and logs[1].query["limitBytes"] == str(len(pieces[0].encode()) + 5)
    with pytest.raises(ValueError, match=r"valid ranks: \[0\]"):
        backend.logs(handle, rank=1)
    with pytest.raises(ValueError, match="unknown kubernetes job"):
        backend.logs(JobHandle("kubernetes", "hetpool-nope-1"))


def test_kueue_job_waits_for_admission(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path, gang_mode="kueue", kueue_queue="team-a")
    handle = backend.submit(request(command="echo admitted"))
    status = backend.poll([handle])[handle.job_id]
    assert status.phase == JobPhase.PENDING and "Kueue" in status.message and "team-a" in status.message
    assert api.items("pods") == []
    api.resume(handle.job_id)
    until(backend, handle, JobPhase.SUCCEEDED)
    assert backend.logs(handle).text == "admitted\n"


def test_inference_runs_as_a_deployment_with_a_service(api: FakeJobsAPI, tmp_path: Path) -> None:
    backend = backend_for(api, tmp_path)
    req = request(
        [worker(0, "node-a", devices=1), worker(1, "node-b", devices=1)], command="echo serving; sleep 300", env={"HETPOOL_SERVE_PORT": "8000"}
    )
    handle = backend.submit(req)
    assert api.get("deployments.apps", handle.job_id) and api.get("services", handle.job_id)["spec"]["ports"][0]["port"] == 8000
    until(backend, handle, JobPhase.RUNNING)
    # Running pods count as available once ready: on a busy machine that is a moment later.
    deadline = time.monotonic() + 10.0
    while not (message := backend.poll([handle])[handle.job_id].message).startswith("serving: 2/2") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert message.startswith("serving: 2/2"), message
    assert sorted(p["spec"]["nodeName"] for p in api.items("pods")) == ["node-a", "node-b"]  # spread over the placed nodes
    assert backend.find("t-abc", 1) == handle and backend.logs(handle, rank=1).text == "serving\n"
    backend.cancel(handle)
    assert {(d.path.rsplit("/", 2)[-2], d.query["propagationPolicy"]) for d in api.calls("DELETE")} == {
        ("deployments", "Background"),
        ("services", "Background"),
    }
    until(backend, handle, JobPhase.CANCELLED)


@pytest.mark.parametrize("mode", ["jobset", "volcano"])
def test_custom_resource_modes_submit_poll_and_cancel(api: FakeJobsAPI, tmp_path: Path, mode: str) -> None:
    """The CRD controllers are not emulated: the test writes the status they would (their documented shapes)."""
    backend = backend_for(api, tmp_path, gang_mode=mode)
    resource = "jobsets.jobset.x-k8s.io" if mode == "jobset" else "jobs.batch.volcano.sh"
    req = request([worker(0, "node-a"), worker(1, "node-a"), worker(2, "node-b")])
    handle = backend.submit(req)
    assert backend.submit(req) == handle and len(api.store[resource]) == 1  # 409 adopted
    assert api.calls("POST")[0].path == (
        "/apis/jobset.x-k8s.io/v1alpha2/namespaces/hetpool/jobsets" if mode == "jobset" else "/apis/batch.volcano.sh/v1alpha1/namespaces/hetpool/jobs"
    )
    assert backend.poll([handle])[handle.job_id].phase == JobPhase.PENDING
    obj = api.get(resource, handle.job_id)
    pod = {
        "metadata": {"name": f"{handle.job_id}-r1-0-0-x7k2p", "labels": {"hetpool.io/job": handle.job_id, "hetpool.io/rank": "1"}},
        "spec": {"containers": [{"name": "worker", "image": "busybox:1.36"}], "nodeName": "node-a"},
        "status": {"phase": "Failed", "containerStatuses": [{"name": "worker", "state": {"terminated": {"exitCode": 7, "reason": "Error"}}}]},
    }
    api.put("pods", pod)
    if mode == "jobset":
        obj["status"] = {
            "conditions": [{"type": "Failed", "status": "True", "reason": "FailedJobs", "message": "jobset failed due to one or more job failures"}]
        }
    else:
        obj["status"] = {"state": {"phase": "Failed", "reason": "PodFailed"}, "failed": 1}
    api.put(resource, obj)
    status = backend.poll([handle])[handle.job_id]
    assert status.phase == JobPhase.FAILED and status.exit_code == 7 and "worker rank 1" in status.message
    assert backend.find("t-abc", 1) == handle
    second = backend.submit(request([worker(0)], attempt=2))
    obj = api.get(resource, second.job_id)
    obj["status"] = {"conditions": []} if mode == "jobset" else {"state": {"phase": "Running"}}
    api.put(resource, obj)
    backend.cancel(second)
    assert api.calls("DELETE")[-1].query == {"propagationPolicy": "Background"} and api.get(resource, second.job_id) is None
    assert backend.poll([second])[second.job_id].phase == JobPhase.CANCELLED


def test_api_errors_raise_and_are_never_lost(api: FakeJobsAPI, tmp_path: Path) -> None:
    wrong = KubernetesBackend({"host": api.url, "token": "nope", "image_default": "x"}, CATALOG, tmp_path)
    with pytest.raises(BackendUnavailableError, match="401.*credentials were rejected"):
        wrong.poll([JobHandle("kubernetes", "hetpool-t-abc-1")])
    elsewhere = backend_for(api, tmp_path, namespace="team-b")
    with pytest.raises(BackendUnavailableError, match='namespaces "team-b" not found'):
        elsewhere.submit(request())
    dead = KubernetesBackend({"host": "http://127.0.0.1:9", "token": TOKEN, "image_default": "x", "timeout_s": "2"}, CATALOG, tmp_path)
    with pytest.raises(BackendUnavailableError, match="unreachable"):
        dead.poll([JobHandle("kubernetes", "hetpool-t-abc-1")])
    lost = backend_for(api, tmp_path).poll([JobHandle("kubernetes", "hetpool-nope-1"), JobHandle("kubernetes", "../etc")])
    assert {k: s.phase for k, s in lost.items()} == {"hetpool-nope-1": JobPhase.LOST, "../etc": JobPhase.LOST}
    with pytest.raises(ValueError, match="host"):
        KubernetesBackend({"host": "10.0.0.1:6443"}, CATALOG, tmp_path)


def test_a_request_the_cluster_would_refuse_leaves_nothing_behind(api: FakeJobsAPI, tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="workers per node differ"):
        backend_for(api, tmp_path).submit(request([worker(0, "node-a"), worker(1, "node-a"), worker(2, "node-b")]))
    assert api.requests == []


def test_kubeconfig_and_context_are_the_connectors_keys(api: FakeJobsAPI, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": api.url}}, {"name": "nowhere", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "hetpool", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "train", "context": {"cluster": "fake", "user": "hetpool", "namespace": "ignored"}},
                    {"name": "other", "context": {"cluster": "nowhere", "user": "hetpool"}},
                ],
                "current-context": "other",
            }
        )
    )
    backend = KubernetesBackend(
        {"kubeconfig": str(kubeconfig), "context": "train", "image_default": "busybox:1.36", "namespace_mode": "single"}, CATALOG, tmp_path
    )
    handle = backend.submit(request())
    assert until(backend, handle, JobPhase.SUCCEEDED).exit_code == 0
    assert api.requests[0].path.startswith("/apis/batch/v1/namespaces/hetpool/")  # the backend's namespace, not the context's


def test_every_request_the_backend_makes_is_granted_by_the_rbac_example(api: FakeJobsAPI, tmp_path: Path) -> None:
    seen = []
    for name, run in (
        ("serve", test_inference_runs_as_a_deployment_with_a_service),
        ("jobset", lambda a, p: test_custom_resource_modes_submit_poll_and_cancel(a, p, "jobset")),
        ("volcano", lambda a, p: test_custom_resource_modes_submit_poll_and_cancel(a, p, "volcano")),
        ("cancel", test_cancel_deletes_in_the_background_and_is_idempotent),
        ("logs", test_logs_slice_bytes_and_keep_characters_whole),
    ):
        api.store, api.requests = {r: {} for r in api.store}, []  # a clean cluster per scenario
        run(api, tmp_path / name)
        seen += api.requests
    granted = {(g, r, v) for rule in RBAC_RULES for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    used = set()
    for call in seen:
        m = re.match(r"^/(?:api/v1|apis/([^/]+)/[^/]+)/namespaces/[^/]+/([^/]+)(?:/([^/]+))?(/log)?$", call.path)
        assert m, call.path
        group, resource, name, log = m.group(1) or "", m.group(2), m.group(3), m.group(4)
        verb = {"POST": "create", "DELETE": "delete"}.get(call.method) or ("get" if name else "list")
        used.add((group, resource + ("/log" if log else ""), verb))
    assert used <= granted, used - granted
    # Most of the Role is exercised here (which optional calls happen can vary with timing).
    assert len(used) >= len(granted) - 2, granted - used


# ------------------------------------------------------------------ the shared contract, on the fake

from tests.engines.contract import *  # noqa: E402, F403 (the contract cases)
from tests.engines.contract import Harness  # noqa: E402


@pytest.fixture
def harness(api: FakeJobsAPI, tmp_path: Path) -> Iterator[Harness]:
    """Kubernetes via the fake: the lifecycle the contract sees is the fake's EMULATION (its
    commands are interpreted, not run); the requests and answers are the API's."""

    def make_worker(rank: int, devices: int) -> WorkerLaunch:
        return worker(rank, f"node-{'abc'[rank % 3]}", model="nvidia-a100-80g" if devices else None, devices=devices, cpu=1.0, memory_gb=1.0)

    h = Harness(kind="kubernetes", make_backend=lambda: backend_for(api, tmp_path), make_worker=make_worker, timeout_s=10)
    yield h
    backend = backend_for(api, tmp_path)
    for handle in h.cleanup:
        backend.cancel(handle)


def test_a_checkpointed_tasks_grace_is_the_pods_termination_grace_period() -> None:
    plain = job_manifest(request(), config(), CATALOG)
    assert "terminationGracePeriodSeconds" not in plain["spec"]["template"]["spec"]
    graceful = job_manifest(dataclasses.replace(request(), stop_signal="SIGTERM", stop_grace_s=90.5), config(), CATALOG)
    validate(graceful)
    assert graceful["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == 91
