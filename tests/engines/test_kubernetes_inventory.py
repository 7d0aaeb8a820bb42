"""The Kubernetes connector: the pure mapping (API-shaped dicts → observation) and the
official `kubernetes` client run over HTTP against a recorded-protocol fake API server.

The fake (tests/engines/k8s_fake.py) is NOT a kube-apiserver — none can run on this
project's CI machines — it replays NodeList / PodList objects in the real API shape
(tests/engines/fixtures/k8s/, schema-validated below with kubernetes-validate) and
implements the list protocol the connector uses (pagination, selectors, bearer tokens).
"""

from __future__ import annotations

import copy
import json
import socket
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import SoftwareStack
from hetpool.engines.base import SEES_USED, ConnectorError, NodeState
from hetpool.engines.kubernetes.devices import cpu_cores, hami_devices, memory_gb, parse_overrides, parse_quantity
from hetpool.engines.kubernetes.inventory import LABELS, POD_FIELD_SELECTOR, KubernetesConnector, build_observation, map_node, pod_requests
from hetpool.engines.registry import connector_for
from tests.engines.k8s_fake import FakeKubeAPI, field_matcher

FIXTURES = Path(__file__).parent / "fixtures" / "k8s"
NODE_LIST = json.loads((FIXTURES / "nodes.json").read_text())
POD_LIST = json.loads((FIXTURES / "pods.json").read_text())
CATALOG = DeviceCatalog.builtin()
TOKEN = "test-token"


def _nodes() -> list[dict]:
    return copy.deepcopy(NODE_LIST["items"])


def _node(name: str) -> dict:
    return next(n for n in _nodes() if n["metadata"]["name"] == name)


def _bound_pods() -> list[dict]:
    """What the API returns for the connector's field selector (the fake applies the same rule)."""
    return [p for p in copy.deepcopy(POD_LIST["items"]) if field_matcher(POD_FIELD_SELECTOR)(p)]


def _observe(nodes: list[dict] | None = None, pods: list[dict] | None = None, overrides: dict | None = None):
    obs = build_observation(_nodes() if nodes is None else nodes, _bound_pods() if pods is None else pods, CATALOG, overrides)
    return obs, {n.name: n for n in obs.nodes}


def _gpu_node(name: str, resources: dict[str, str], labels: dict[str, str] | None = None, annotations: dict | None = None) -> dict:
    """A minimal Node for the cases the fixture cluster does not have."""
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/arch": "amd64", **(labels or {})}, "annotations": annotations or {}},
        "spec": {},
        "status": {"capacity": {"cpu": "32", "memory": "256Gi", **resources}, "conditions": [{"type": "Ready", "status": "True"}]},
    }


# ------------------------------------------------------------------ fixtures are schema-valid


def test_fixtures_are_valid_kubernetes_objects() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc, kind in ((NODE_LIST, "Node"), (POD_LIST, "Pod")):
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
        assert doc["items"]
        for item in doc["items"]:
            # List items come without kind/apiVersion on the wire; the validator needs them.
            kubernetes_validate.validate({"apiVersion": "v1", "kind": kind, **item}, "1.33.0", strict=True)


# ------------------------------------------------------------------ quantities and small parsers


@pytest.mark.parametrize(
    ("text", "value"),
    [("16", 16), ("15500m", Decimal("15.5")), ("65536Ki", 65536 * 1024), ("64Gi", 64 * 2**30), ("1e3", 1000), ("1.5G", 1_500_000_000), ("0", 0)],
)
def test_parse_quantity(text: str, value) -> None:
    assert parse_quantity(text) == Decimal(value)


def test_parse_quantity_agrees_with_the_official_client() -> None:
    utils = pytest.importorskip("kubernetes.utils")
    for text in ("16", "15500m", "250m", "65536Ki", "2113389052Ki", "64Gi", "1e3", "100M", "0.5", "1Ti", "12E"):
        assert parse_quantity(text) == utils.parse_quantity(text), text
    with pytest.raises(ValueError):
        parse_quantity("lots")


def test_cpu_and_memory() -> None:
    assert cpu_cores("16") == 16 and cpu_cores("15500m") == 15
    assert memory_gb("64Gi") == 64.0 and memory_gb("65536Ki") == 0.062 and memory_gb("2113389052Ki") == 2015.485


def test_parse_overrides() -> None:
    assert parse_overrides("nvidia.com/gpu=nvidia-h20, 910B3=ascend-910b3") == {"nvidia.com/gpu": "nvidia-h20", "910B3": "ascend-910b3"}
    assert parse_overrides('{"hygon.com/dcunum": "hygon-k100"}') == {"hygon.com/dcunum": "hygon-k100"}
    assert parse_overrides("") == {}
    for bad in ("nvidia.com/gpu", "{not json", '["a"]'):
        with pytest.raises(ConnectorError):
            parse_overrides(bad)


def test_hami_register_annotation() -> None:
    annotations = {
        "hami.io/node-handshake": "Requesting_2024.05.14 07:07:33",
        "hami.io/node-nvidia-register": (
            "GPU-0055,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:GPU-0fc3,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,false:"
        ),
        "hami.io/node-mlu-register": "MLU-4501,10,23308,0,MLU-MLU370-X4,0,false:",
    }
    found = hami_devices(annotations)
    assert [(d.split, d.memory_mib, d.device_type, d.healthy) for d in found["nvidia"]] == [
        (10, 32768, "NVIDIA-Tesla V100-PCIE-32GB", True),
        (10, 32768, "NVIDIA-Tesla V100-PCIE-32GB", False),
    ]
    assert found["cambricon"][0].device_type == "MLU-MLU370-X4"


def test_pod_requests_follow_the_kubelet_rule() -> None:
    def c(gpus: str, **kw) -> dict:
        return {"name": "c", "resources": {"limits": {"nvidia.com/gpu": gpus, "cpu": "1"}}, **kw}

    pod = {"spec": {"containers": [c("2"), c("1")], "initContainers": [c("4")]}}
    assert pod_requests(pod) == {"nvidia.com/gpu": 4}  # the init container needs more than the apps together
    pod["spec"]["initContainers"] = [c("1", restartPolicy="Always"), c("3")]
    assert pod_requests(pod) == {"nvidia.com/gpu": 4}  # app 3 + sidecar 1; init 3 + sidecar 1
    assert pod_requests({"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}) == {}


# ------------------------------------------------------------------ mapping the fixture cluster


def test_fixture_cluster_models_counts_used_and_states() -> None:
    obs, nodes = _observe()
    assert obs.sees >= {SEES_USED, "devices", "states", "labels", "taints", "stack", "partitions"}
    table = {n.name: (n.state.value, n.devices, n.used) for n in obs.nodes}
    assert table == {
        "dgx-a100-01": ("ready", {"nvidia-a100-80g": 8}, {"nvidia-a100-80g": 6}),  # 4 + max(init 1, app 2); the Succeeded pod is gone
        "h100-mig-01": (
            "ready",
            {"nvidia-h100": 4, "unknown-nvidia-h100-mig-1g-10gb": 14, "unknown-nvidia-h100-mig-3g-40gb": 4},
            {"nvidia-h100": 1, "unknown-nvidia-h100-mig-1g-10gb": 3},
        ),
        "ascend-910b-01": ("ready", {"ascend-910b3": 7}, {"ascend-910b3": 4}),  # allocatable 7 of 8
        "ascend-310p-01": ("ready", {"ascend-310p": 8}, {}),
        "mi300x-01": ("ready", {"amd-mi300x": 8}, {"amd-mi300x": 8}),
        "hami-a100-01": ("ready", {"nvidia-a100-40g": 4}, {"nvidia-a100-40g": 2}),  # 40 HAMi shares = 4 GPUs x 10
        "a100-pcie-02": ("down", {"nvidia-a100-80g": 4}, {}),
        "l40s-03": ("draining", {"nvidia-l40s": 4}, {"nvidia-l40s": 1}),
        "cpu-01": ("ready", {}, {}),
        "odd-accel-01": ("ready", {"unknown-metax-tech-gpu": 8}, {}),
    }
    assert nodes["ascend-910b-01"].arch == "aarch64" and nodes["dgx-a100-01"].arch == "x86_64"
    assert (nodes["dgx-a100-01"].cpu_cores, nodes["dgx-a100-01"].memory_gb) == (256, 2015.485)
    for node in obs.nodes:  # what the sync service will build from it must validate
        if node.stack:
            SoftwareStack.model_validate(node.stack)


def test_gfd_labels_become_stack_labels_and_partition() -> None:
    _, nodes = _observe()
    dgx = nodes["dgx-a100-01"]
    assert dgx.stack == {"driver": "535.104.05", "runtime": {"name": "cuda", "version": "12.2"}}
    assert {k: v for k, v in dgx.labels.items() if k.startswith("hetpool.io/")} == {
        "hetpool.io/arch": "x86_64",
        "hetpool.io/os": "linux",
        "hetpool.io/zone": "cn-north-1a",
        "hetpool.io/region": "cn-north-1",
        "hetpool.io/instance-type": "dgx-a100",
        "hetpool.io/node-group": "gpu-a100",
        "hetpool.io/device.vendor": "nvidia",
        "hetpool.io/device.model": "nvidia-a100-80g",
        "hetpool.io/device.count": "8",
        "hetpool.io/device.product": "NVIDIA-A100-SXM4-80GB",
        "hetpool.io/device.memory-gb": "80",
        "hetpool.io/driver.version": "535.104.05",
        "hetpool.io/runtime.cuda": "12.2",
        "hetpool.io/sharing": "none",
    }
    assert dgx.labels["nvidia.com/gpu.machine"] == "DGXA100-920-23687-2530-000"  # the node's own labels are kept
    assert dgx.partitions == ["gpu-a100"] and dgx.taints == []
    assert dgx.extra["other_resources"] == {"rdma/rdma_shared_device_a": "63"}  # not an accelerator, not dropped
    assert dgx.extra["workload_pods"] == 2  # the device-plugin DaemonSet pod is not workload


def test_every_hetpool_label_is_in_the_documented_vocabulary() -> None:
    obs, _ = _observe()
    emitted = {k for n in obs.nodes for k in n.labels if k.startswith("hetpool.io/")}
    assert emitted <= set(LABELS), emitted - set(LABELS)


def test_mig_mixed_slices_are_placeholder_models_with_warnings() -> None:
    obs, nodes = _observe()
    h100 = nodes["h100-mig-01"]
    assert h100.labels["hetpool.io/slicing"] == "mig" and h100.labels["hetpool.io/mig.strategy"] == "mixed"
    assert h100.labels["hetpool.io/device.model"] == "nvidia-h100" and h100.labels["hetpool.io/device.count"] == "4"
    assert h100.extra["slices"]["nvidia.com/mig-3g.40gb"] == {"model": "unknown-nvidia-h100-mig-3g-40gb", "parent": "nvidia-h100", "count": 4}
    assert any("unknown-nvidia-h100-mig-1g-10gb" in w and "h100-mig-01" in w for w in obs.warnings)


def test_mig_single_counts_slices_not_whole_gpus() -> None:
    labels = {"nvidia.com/gpu.product": "A100-SXM4-40GB-MIG-1g.5gb", "nvidia.com/mig.strategy": "single", "nvidia.com/gpu.count": "28"}
    mapping = map_node(_gpu_node("mig-single", {"nvidia.com/gpu": "28"}, labels), CATALOG)
    assert mapping.node.devices == {"unknown-nvidia-a100-40g-mig-1g-5gb": 28}
    assert mapping.node.labels["hetpool.io/slicing"] == "mig"


def test_ascend_nodes() -> None:
    obs, nodes = _observe()
    b = nodes["ascend-910b-01"]
    assert b.stack == {"driver": "24.1.rc2"}
    assert b.labels["hetpool.io/device.product"] == "910B3" and b.labels["hetpool.io/device.memory-gb"] == "64"
    assert b.extra["unallocatable"] == {"huawei.com/Ascend910": 1}
    assert b.extra["device_health"] == {"huawei.com/Ascend910-Unhealthy": "Ascend910-7"}
    assert "node ascend-910b-01: huawei.com/Ascend910: 1 of 8 not allocatable (unhealthy devices?)" in obs.warnings
    p = nodes["ascend-310p-01"]
    assert p.labels["hetpool.io/device.vendor"] == "huawei" and p.labels["infer-card-type"] == "card-300i-duo"


def test_ascend_hami_and_vnpu_resources() -> None:
    node = _gpu_node(
        "npu-shared",
        {"huawei.com/Ascend910B3": "8", "huawei.com/Ascend910B3-memory": "524288", "huawei.com/Ascend910-4c": "4"},
        {"node.kubernetes.io/npu.chip.name": "910B3"},
    )
    mapping = map_node(node, CATALOG)
    assert mapping.node.devices == {"ascend-910b3": 8, "unknown-huawei-ascend-910b3-vnpu-4c": 4}
    assert mapping.node.extra["share_resources"] == {"huawei.com/Ascend910B3-memory": "524288"}
    assert mapping.node.labels["hetpool.io/sharing"] == "hami" and mapping.node.labels["hetpool.io/slicing"] == "vnpu"


def test_amd_node() -> None:
    _, nodes = _observe()
    mi = nodes["mi300x-01"]
    assert mi.stack == {"driver": "6.8.5"} and mi.partitions == ["amd-mi300x"]
    assert mi.labels["hetpool.io/device.memory-gb"] == "192" and mi.labels["hetpool.io/device.product"] == "AMD_Instinct_MI300X_OAM"


def test_hami_shares_are_facts_not_devices() -> None:
    _, nodes = _observe()
    hami = nodes["hami-a100-01"]
    assert hami.labels["hetpool.io/sharing"] == "hami"
    assert hami.extra["shares"]["nvidia.com/gpu"] == {"model": "nvidia-a100-40g", "shares": 40, "shares_per_device": 10}
    assert hami.extra["share_requests"] == {"nvidia.com/gpumem": "30000", "nvidia.com/gpucores": "30"}
    assert [d["device_type"] for d in hami.extra["hami_devices"]["nvidia"]] == ["NVIDIA-NVIDIA A100-SXM4-40GB"] * 4


def test_time_slicing_replicas_count_physical_gpus() -> None:
    labels = {"nvidia.com/gpu.product": "NVIDIA-H20-SHARED", "nvidia.com/gpu.replicas": "4", "nvidia.com/gpu.sharing-strategy": "time-slicing"}
    node = _gpu_node("ts-1", {"nvidia.com/gpu": "32"}, labels)
    pods = [{"spec": {"nodeName": "ts-1", "containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}} for _ in range(10)]
    _, nodes = _observe([node], pods)
    assert nodes["ts-1"].devices == {"nvidia-h20": 8}
    assert nodes["ts-1"].used == {"nvidia-h20": 8}  # 10 shares in use may touch all 8 GPUs: capped, never more
    assert nodes["ts-1"].labels["hetpool.io/sharing"] == "time-slicing"


def test_not_ready_unknown_and_missing_conditions() -> None:
    _, nodes = _observe()
    down = nodes["a100-pcie-02"]
    assert down.state == NodeState.DOWN and down.reason.startswith("container runtime network not ready")
    assert down.taints == ["node.kubernetes.io/not-ready:NoSchedule"]
    unknown = _node("a100-pcie-02")
    unknown["status"]["conditions"][-1].update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    assert map_node(unknown, CATALOG).node.reason == "Kubelet stopped posting node status."
    unknown["status"]["conditions"] = []
    assert map_node(unknown, CATALOG).node.state == NodeState.UNKNOWN


def test_cordoned_node_drains_then_is_drained() -> None:
    _, nodes = _observe()
    l40s = nodes["l40s-03"]
    assert l40s.state == NodeState.DRAINING
    assert l40s.reason == "cordoned (spec.unschedulable); taints maintenance=bios-upgrade:NoSchedule"
    assert l40s.taints == ["maintenance=bios-upgrade:NoSchedule", "node.kubernetes.io/unschedulable:NoSchedule"]
    only_daemonsets = [p for p in _bound_pods() if p["metadata"]["name"] != "render-0-9d0e1-uvwxy"]
    _, nodes = _observe(pods=only_daemonsets)
    assert nodes["l40s-03"].state == NodeState.DRAINED and nodes["l40s-03"].used == {}
    unseen = {n.name: n for n in build_observation(_nodes(), None, CATALOG).nodes}
    assert unseen["l40s-03"].state == NodeState.DRAINING  # without the pods nobody can tell it is empty


def test_cpu_only_node() -> None:
    _, nodes = _observe()
    cpu = nodes["cpu-01"]
    assert cpu.devices == {} and cpu.stack is None and cpu.partitions == ["general"]
    assert cpu.labels["hetpool.io/device.count"] == "0" and "hetpool.io/device.model" not in cpu.labels
    assert cpu.labels["hetpool.io/instance-type"] == "c7i.16xlarge"


def test_unknown_and_ambiguous_devices_are_kept_with_warnings() -> None:
    obs, nodes = _observe()
    assert nodes["odd-accel-01"].labels["hetpool.io/device.vendor"] == "metax-tech"
    assert (
        "node odd-accel-01: metax-tech.com/gpu: no catalog model uses this resource; registered as unknown-metax-tech-gpu (set resource_models)"
        in obs.warnings
    )
    gh200 = map_node(_gpu_node("gh", {"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.product": "NVIDIA-GH200-480GB"}), CATALOG)
    assert gh200.node.devices == {"unknown-nvidia-gh200-480gb": 1}
    assert "'NVIDIA-GH200-480GB' is not in the catalog" in gh200.problems[0]
    bare = map_node(_gpu_node("bare", {"nvidia.com/gpu": "2", "hygon.com/dcunum": "8", "kunlunxin.com/xpu": "8"}), CATALOG)
    assert bare.node.devices == {"unknown-nvidia-gpu": 2, "unknown-hygon-dcunum": 8, "unknown-kunlunxin-xpu": 8}
    assert any("which of hygon-k100, hygon-z100" in p for p in bare.problems)


def test_resource_models_override_by_resource_and_by_product() -> None:
    node = _gpu_node("bare", {"nvidia.com/gpu": "2", "hygon.com/dcunum": "8", "cambricon.com/mlu": "4"}, {"Model": "MLU370-X8"})
    mapping = map_node(node, CATALOG, parse_overrides("hygon.com/dcunum=hygon-k100"))
    assert mapping.node.devices == {"unknown-nvidia-gpu": 2, "hygon-k100": 8, "cambricon-mlu370-x8": 4}
    gfd = _gpu_node("h", {"nvidia.com/gpu": "8"}, {"nvidia.com/gpu.product": "NVIDIA-H100-NVL"})
    assert map_node(gfd, CATALOG, {"NVIDIA-H100-NVL": "nvidia-h100"}).node.devices == {"nvidia-h100": 8}
    typed = map_node(_gpu_node("c", {"cambricon.com/mlu370": "8", "cambricon.com/mlu370.mim-2m.8gb": "2"}), CATALOG)
    assert typed.node.devices == {"cambricon-mlu370-x8": 8, "unknown-cambricon-mlu370-x8-mim-2m-8gb": 2}


def test_bad_labels_are_warnings_not_failures() -> None:
    labels = {
        "kubernetes.io/arch": "s390x",
        "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
        "nvidia.com/gpu.replicas": "many",
        "nvidia.com/gpu.memory": "80G",
        "nvidia.com/cuda.runtime-version.major": "12",
        "nvidia.com/cuda.runtime-version.minor": "x",
    }
    mapping = map_node(_gpu_node("weird", {"nvidia.com/gpu": "8", "example.com/gpu": "lots"}, labels), CATALOG)
    assert mapping.node.devices == {"nvidia-a100-80g": 8} and mapping.node.arch == "x86_64" and mapping.node.stack is None
    problems = "\n".join(mapping.problems)
    for part in ("kubernetes.io/arch='s390x'", "nvidia.com/gpu.replicas='many'", "nvidia.com/gpu.memory='80G'", "(12.x)", "'lots' is not valid"):
        assert part in problems


def test_repeated_problems_are_grouped_across_nodes() -> None:
    nodes = [_gpu_node(f"m{i}", {"metax-tech.com/gpu": "8"}) for i in range(7)]
    obs, _ = _observe(nodes, [])
    message = "metax-tech.com/gpu: no catalog model uses this resource; registered as unknown-metax-tech-gpu (set resource_models)"
    assert obs.warnings == [f"7 nodes (m0, m1, m2, m3, m4 and 2 more): {message}"]


# ------------------------------------------------------------------ the official client over HTTP


@pytest.fixture
def fake_api():
    pytest.importorskip("kubernetes")  # the HTTP tests run the official client; without it they are skipped
    with FakeKubeAPI(NODE_LIST["items"], POD_LIST["items"], token=TOKEN) as api:
        yield api


def _connector(api: FakeKubeAPI, **config: str) -> KubernetesConnector:
    pytest.importorskip("kubernetes")
    return KubernetesConnector({"host": api.url, "token": TOKEN, **config}, CATALOG)


def test_fetch_over_http_matches_the_mapping_and_sends_the_token(fake_api: FakeKubeAPI) -> None:
    obs = _connector(fake_api).fetch()
    expected, _ = _observe()
    assert [(n.name, n.devices, n.used, n.state, n.labels, n.stack) for n in obs.nodes] == [
        (n.name, n.devices, n.used, n.state, n.labels, n.stack) for n in expected.nodes
    ]
    assert obs.warnings == expected.warnings and SEES_USED in obs.sees
    assert obs.extra["server_version"] == "v1.33.4" and obs.extra["pods_counted"] == 12
    assert fake_api.paths() == ["/version/", "/api/v1/nodes", "/api/v1/pods"]
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in fake_api.requests)
    assert fake_api.requests[2].query["fieldSelector"] == POD_FIELD_SELECTOR


def test_pagination_follows_continue_tokens(fake_api: FakeKubeAPI) -> None:
    obs = _connector(fake_api, page_size="3").fetch()
    assert len(obs.nodes) == 10
    node_requests = [r for r in fake_api.requests if r.path == "/api/v1/nodes"]
    assert [r.query["limit"] for r in node_requests] == ["3"] * 4
    assert "continue" not in node_requests[0].query and all(r.query["continue"] for r in node_requests[1:])
    assert sum(r.path == "/api/v1/pods" for r in fake_api.requests) == 4  # 12 bound pods in pages of 3
    assert {n.name: n.used for n in obs.nodes} == {n.name: n.used for n in _observe()[0].nodes}


def test_expired_continue_token_restarts_the_list_once(fake_api: FakeKubeAPI) -> None:
    fake_api.expire_next_continue = True
    obs = _connector(fake_api, page_size="4", count_used="false").fetch()
    assert sorted(n.name for n in obs.nodes) == sorted(n["metadata"]["name"] for n in NODE_LIST["items"])
    assert ["continue" in r.query for r in fake_api.requests if r.path == "/api/v1/nodes"] == [False, True, False, True, True]


def test_label_selector_is_sent_and_honoured(fake_api: FakeKubeAPI) -> None:
    obs = _connector(fake_api, label_selector="accelerator=huawei-Ascend910").fetch()
    assert [n.name for n in obs.nodes] == ["ascend-910b-01"]
    assert fake_api.requests[1].query["labelSelector"] == "accelerator=huawei-Ascend910"


def test_bad_label_selector_is_a_connector_error(fake_api: FakeKubeAPI) -> None:
    with pytest.raises(ConnectorError, match="400 Bad Request: unable to parse requirement"):
        _connector(fake_api, label_selector="accelerator in (a,b").fetch()


def test_wrong_token_is_a_connector_error(fake_api: FakeKubeAPI) -> None:
    with pytest.raises(ConnectorError, match="401 Unauthorized.*credentials were rejected"):
        KubernetesConnector({"host": fake_api.url, "token": "stale"}, CATALOG).fetch()


def test_forbidden_pods_drop_used_from_sees() -> None:
    with FakeKubeAPI(NODE_LIST["items"], POD_LIST["items"], token=TOKEN, forbidden=("/api/v1/pods",)) as api:
        obs = _connector(api).fetch()
    assert SEES_USED not in obs.sees and all(n.used == {} for n in obs.nodes)
    assert obs.warnings[0].startswith("pods not readable, so used counts are not reported: 403 Forbidden")
    assert "RBAC" in obs.warnings[0]


def test_count_used_off_lists_no_pods(fake_api: FakeKubeAPI) -> None:
    obs = _connector(fake_api, count_used="false").fetch()
    assert "/api/v1/pods" not in fake_api.paths() and SEES_USED not in obs.sees


def test_unreachable_server_is_a_connector_error() -> None:
    pytest.importorskip("kubernetes")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConnectorError, match="unreachable"):
        KubernetesConnector({"host": f"http://127.0.0.1:{port}", "token": TOKEN, "timeout_s": "2"}, CATALOG).fetch()
    assert time.monotonic() - started < 5  # no retry storm


def test_kubeconfig_and_context(fake_api: FakeKubeAPI, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        json.dumps(  # kubeconfig is YAML; JSON is YAML
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "fake", "cluster": {"server": fake_api.url}}, {"name": "other", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "hetpool", "user": {"token": TOKEN}}],
                "contexts": [
                    {"name": "gpu", "context": {"cluster": "fake", "user": "hetpool"}},
                    {"name": "dead", "context": {"cluster": "other", "user": "hetpool"}},
                ],
                "current-context": "dead",
            }
        )
    )
    pytest.importorskip("kubernetes")
    obs = KubernetesConnector({"kubeconfig": str(kubeconfig), "context": "gpu", "count_used": "false"}, CATALOG).fetch()
    assert len(obs.nodes) == 10 and fake_api.requests[0].headers["authorization"] == f"Bearer {TOKEN}"
    with pytest.raises(ConnectorError, match="cannot load the client configuration"):
        KubernetesConnector({"kubeconfig": str(tmp_path / "missing")}, CATALOG).fetch()


def test_config_errors_and_registry() -> None:
    assert isinstance(connector_for("kubernetes", {"host": "https://k8s.example:6443"}, CATALOG), KubernetesConnector)
    for bad in ({"timeout_s": "soon"}, {"page_size": "0"}, {"host": "k8s.example:6443"}, {"resource_models": "nvidia.com/gpu"}):
        with pytest.raises(ConnectorError):
            KubernetesConnector(bad, CATALOG)


def test_missing_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "kubernetes", None)  # import kubernetes → ImportError
    with pytest.raises(ConnectorError, match=r"pip install 'hetpool\[kubernetes\]'"):
        KubernetesConnector({"host": "http://127.0.0.1:1"}, CATALOG).fetch()


# ------------------------------------------------------------------ into the inventory


def test_sync_service_registers_the_observed_cluster(ctx, api, fake_api: FakeKubeAPI) -> None:
    from hetpool.server.services.connector_sync import sync_cluster

    pytest.importorskip("kubernetes")
    config = {"host": fake_api.url, "token": TOKEN, "sync": "off"}
    assert (
        api.post(
            "/api/v1/apply", json={"documents": [{"kind": "Cluster", "name": "k8s", "backend": "kubernetes", "backend_config": config}]}
        ).status_code
        == 200
    )
    summary = sync_cluster(ctx, "k8s")
    assert summary["nodes"] == 10 and summary["states"] == {"ready": 8, "down": 1, "draining": 1}
    assert summary["devices"]["nvidia-a100-80g"] == {"total": 12, "used": 6}
    placeholder = api.get("/api/v1/objects/devicemodels/unknown-nvidia-h100-mig-1g-10gb").json()
    assert placeholder["verified"] is False and placeholder["class"] == "gpu"
    assert api.get("/api/v1/objects/nodes/ascend-910b-01").json()["arch"] == "aarch64"
