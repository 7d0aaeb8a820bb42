"""Kubernetes inventory connector: nodes, typed accelerators, usage, states, labels, stack.

Uses the official `kubernetes` client (`pip install 'hetpool[kubernetes]'`), imported in `fetch()`
only. The mapping is pure functions over API-shaped dicts (`map_node`, `pod_requests`,
`build_observation`); the HTTP part is tested against a recorded-protocol fake API server
(tests/engines/k8s_fake.py), as no kube-apiserver can run in this project's CI.

Config keys (a Cluster's `backend_config`, all strings):

| key | meaning |
|---|---|
| `kubeconfig` | kubeconfig file (default: `$KUBECONFIG`, else `~/.kube/config`) |
| `context` | context in that kubeconfig (default: its current-context) |
| `host` | API server URL, e.g. `https://10.0.0.1:6443`; used instead of a kubeconfig |
| `token` / `token_file` | bearer token (or a file holding one), with `host` |
| `ca_file` | CA bundle for the server certificate, with `host` |
| `insecure_skip_tls_verify` | `true`: do not verify the server certificate (test clusters only) |
| `in_cluster` | `true`: use the pod's service account (the default inside a pod when nothing else is set) |
| `label_selector` | only nodes that match, e.g. `accelerator=huawei-Ascend910` |
| `resource_models` | `key=model,…` or a JSON object; a key with a `/` is a resource (`nvidia.com/gpu`), else a product (`NVIDIA-H20`) |
| `node_group_label` | label whose value is the node's partition (default: the EKS / GKE / AKS / Karpenter node-pool label) |
| `count_used` | `false`: do not list pods; `used` is then not claimed |
| `page_size` | list page size (default 500) |
| `timeout_s` | per-request timeout in seconds (default 10) |

Device mapping. A resource name alone is ambiguous (`nvidia.com/gpu` is any NVIDIA GPU), so
the model comes from, in order: `resource_models`; the product the device plugin labels the
node with (GFD `nvidia.com/gpu.product`, Ascend `node.kubernetes.io/npu.chip.name`, AMD
`amd.com/gpu.product-name`, Cambricon `Model`, the device type in HAMi's register
annotation) or named in the resource (`huawei.com/Ascend910B3`, `cambricon.com/mlu370`);
the one catalog model with that `k8s_resource`. Anything else becomes an `unknown-…` model
with a warning, never dropped. Counts come from `allocatable` (what k8s will place on).
- MIG (`nvidia.com/mig-1g.10gb`, or GFD "single" products `…-MIG-1g.5gb`), Ascend vNPU
  (`huawei.com/Ascend910-2c`) and Cambricon MIM slices are not whole devices of any model:
  each profile becomes its own placeholder model `unknown-<vendor>-<parent>-<kind>-<profile>`
  (so it is registered, pooled and schedulable by name) and is listed in `extra`.
- Shared devices (HAMi split, GFD time-slicing / MPS replicas) are counted as physical
  devices; the share count goes to `extra`. Share-size resources (`nvidia.com/gpumem`,
  `gpucores`, `hygon.com/dcumem`, `*-memory`/`*-core` …) are facts, never devices.
- Used counts: pods bound to a node and not finished, summed with the kubelet's rule
  (containers + sidecars vs. the largest init container). A shared device counts as used
  while any share of it is taken; the plugin may spread shares over devices, so used
  shares are capped at the node's device count (an upper bound, the safe side for placing).
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines import base
from hetpool.engines.base import ConnectorError, InventoryConnector, InventoryObservation, NodeState, ObservedNode
from hetpool.engines.kubernetes.client import api_client as make_api_client
from hetpool.engines.kubernetes.client import api_error, import_client, where
from hetpool.engines.kubernetes.devices import (
    ASCEND_FACT_RE,
    PRODUCT_LABELS,
    SHARE_FACTS,
    DeviceResource,
    MappedDevices,
    Resolver,
    cpu_cores,
    int_label,
    map_devices,
    memory_gb,
    parse_overrides,
    parse_quantity,
    vendor_of,
)

KIND = "kubernetes"
FORBIDDEN_HINT = "the identity needs RBAC get/list on nodes, and list on pods for used counts"
# Bound and not finished: the pods whose requests the scheduler still counts on a node.
POD_FIELD_SELECTOR = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"

# The hetpool.io label vocabulary written on every observed node (the node's own labels are kept too).
LABELS: dict[str, str] = {
    "hetpool.io/arch": "x86_64 | aarch64, from kubernetes.io/arch (amd64 → x86_64, arm64 → aarch64)",
    "hetpool.io/os": "from kubernetes.io/os (linux, windows)",
    "hetpool.io/zone": "from topology.kubernetes.io/zone (or the deprecated failure-domain.beta.kubernetes.io/zone)",
    "hetpool.io/region": "from topology.kubernetes.io/region",
    "hetpool.io/instance-type": "from node.kubernetes.io/instance-type",
    "hetpool.io/node-group": "the node's node pool, also its partition: `node_group_label`, else the EKS / GKE / AKS / Karpenter label",
    "hetpool.io/device.vendor": "vendor of the node's main accelerator (nvidia, huawei, amd, cambricon, hygon, kunlunxin, or the resource's domain)",
    "hetpool.io/device.model": "catalog model of the main accelerator (the one with most devices), or its unknown-… placeholder",
    "hetpool.io/device.count": "number of those devices; 0 on a node without accelerators",
    "hetpool.io/device.product": "product as the device plugin labels it (nvidia.com/gpu.product, npu.chip.name, amd.com/gpu.product-name, Model)",
    "hetpool.io/device.memory-gb": "memory per device from nvidia.com/gpu.memory (MiB), amd.com/gpu.vram or mind-cluster/npu-chip-memory",
    "hetpool.io/driver.version": "from nvidia.com/cuda.driver-version.*, huawei.com/driver.version, amd.com/gpu.driver-version or DriverVersion",
    "hetpool.io/runtime.cuda": "CUDA version the NVIDIA driver supports, from nvidia.com/cuda.runtime-version.*",
    "hetpool.io/sharing": "none | hami | time-slicing | mps | volcano | env-share | dynamic-smlu (several joined by +): how devices are shared",
    "hetpool.io/slicing": "mig | vnpu | mim (several joined by +): devices cut into fixed slices, each profile a placeholder model",
    "hetpool.io/mig.strategy": "single | mixed, from nvidia.com/mig.strategy",
}

_ARCH = {"amd64": "x86_64", "x86_64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}
_NODE_GROUP_LABELS = ("eks.amazonaws.com/nodegroup", "cloud.google.com/gke-nodepool", "kubernetes.azure.com/agentpool", "karpenter.sh/nodepool")
# ----------------------------------------------------------------------------- pure parsing


def node_state(node: dict) -> tuple[NodeState, str]:
    """Ready True → READY; False/Unknown → DOWN (with the condition's message); cordoned → DRAINING.
    DRAINED (cordoned and empty) needs the pods: see `build_observation`."""
    spec, status = node.get("spec") or {}, node.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), None)
    cordoned = bool(spec.get("unschedulable"))
    if ready is None:
        return NodeState.UNKNOWN, "the node reports no Ready condition"
    if ready.get("status") != "True":
        reason = ready.get("message") or ready.get("reason") or f"Ready={ready.get('status')}"
        return NodeState.DOWN, reason + ("; also cordoned" if cordoned else "")
    if cordoned:
        extra = [t for t in taints(node) if not t.startswith("node.kubernetes.io/unschedulable")]
        return NodeState.DRAINING, "cordoned (spec.unschedulable)" + (f"; taints {', '.join(extra)}" if extra else "")
    return NodeState.READY, ""


def taints(node: dict) -> list[str]:
    """Taints as "key=value:Effect", or "key:Effect" without a value (kubectl's notation)."""
    out = []
    for taint in (node.get("spec") or {}).get("taints") or []:
        value = taint.get("value")
        out.append(f"{taint.get('key', '')}{'=' + value if value else ''}:{taint.get('effect', '')}")
    return out


# ----------------------------------------------------------------------------- device mapping


@dataclass
class NodeMapping:
    """A node as observed, plus what the pods pass needs to add used counts."""

    node: ObservedNode
    resources: dict[str, DeviceResource] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # per-node warnings, grouped across nodes later


def map_node(node: dict, catalog: DeviceCatalog, overrides: dict[str, str] | None = None, node_group_label: str = "") -> NodeMapping:
    """One API Node object (a dict as the API returns it) as hetpool sees it, without used counts."""
    meta, status = node.get("metadata") or {}, node.get("status") or {}
    labels: dict[str, str] = dict(meta.get("labels") or {})
    capacity: dict[str, str] = dict(status.get("capacity") or {})
    allocatable: dict[str, str] = dict(status.get("allocatable") or capacity)
    info = status.get("nodeInfo") or {}
    problems: list[str] = []

    raw_arch = labels.get("kubernetes.io/arch") or info.get("architecture") or "amd64"
    arch = _ARCH.get(raw_arch.lower())
    if arch is None:
        problems.append(f"label kubernetes.io/arch={raw_arch!r} is neither amd64 nor arm64; recorded as x86_64")
        arch = "x86_64"
    cores, mem = 0, 0.0
    try:
        cores, mem = cpu_cores(capacity.get("cpu", "0")), memory_gb(capacity.get("memory", "0"))
    except ValueError as exc:
        problems.append(f"capacity: {exc}")
    dev = map_devices(labels, dict(meta.get("annotations") or {}), capacity, allocatable, Resolver(catalog, overrides or {}), problems)
    ranked = dev.whole or dev.counts  # the main device: whole devices before slices, then the most of them
    main = min(ranked, key=lambda m: (-ranked[m], m), default="")
    vendor = next((vendor_of(r) for r, d in dev.resources.items() if d.model == main), "")
    stack = node_stack(labels, vendor, problems)
    group = next((labels[k] for k in ((node_group_label,) if node_group_label else _NODE_GROUP_LABELS) if labels.get(k)), "")
    hp = _hetpool_labels(labels, arch, main, vendor, dev, stack, group, problems)
    dev.extra["node_info"] = {k: info[k] for k in ("kubeletVersion", "osImage", "kernelVersion", "containerRuntimeVersion") if info.get(k)}
    dev.extra["allocatable"] = {k: allocatable[k] for k in ("cpu", "memory") if k in allocatable}
    state, reason = node_state(node)
    observed = ObservedNode(
        name=meta.get("name", ""),
        cpu_cores=cores,
        memory_gb=mem,
        state=state,
        reason=reason,
        arch=arch,
        devices=dict(dev.counts),
        labels={**labels, **hp},
        taints=taints(node),
        partitions=[group] if group else [],
        stack=stack,
        extra={k: v for k, v in dev.extra.items() if v},
    )
    return NodeMapping(observed, dev.resources, problems)


def _hetpool_labels(
    labels: dict, arch: str, main: str, vendor: str, dev: MappedDevices, stack: dict | None, group: str, problems: list[str]
) -> dict[str, str]:
    """The hetpool.io/... vocabulary of `LABELS` for one node."""
    hp: dict[str, str] = {"hetpool.io/arch": arch, "hetpool.io/device.count": str(dev.counts[main] if main else 0)}
    for target, sources in (
        ("hetpool.io/os", ("kubernetes.io/os",)),
        ("hetpool.io/zone", ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")),
        ("hetpool.io/region", ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")),
        ("hetpool.io/instance-type", ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")),
        ("hetpool.io/mig.strategy", ("nvidia.com/mig.strategy",)),
        ("hetpool.io/device.product", (PRODUCT_LABELS.get(vendor, ""),)),
    ):
        value = next((labels[s] for s in sources if labels.get(s)), None)
        if value:
            hp[target] = value
    if group:
        hp["hetpool.io/node-group"] = group
    if main:
        hp["hetpool.io/device.model"], hp["hetpool.io/device.vendor"] = main, vendor
    if main or dev.sharing:
        hp["hetpool.io/sharing"] = "+".join(sorted(dev.sharing)) or "none"
    if dev.slicing:
        hp["hetpool.io/slicing"] = "+".join(sorted(dev.slicing))
    memory = _device_memory_gb(labels, vendor, problems)
    if memory:
        hp["hetpool.io/device.memory-gb"] = memory
    if stack and stack.get("driver"):
        hp["hetpool.io/driver.version"] = stack["driver"]
    if stack and stack.get("runtime"):
        hp[f"hetpool.io/runtime.{stack['runtime']['name']}"] = stack["runtime"]["version"]
    return hp


def _device_memory_gb(labels: dict[str, str], vendor: str, problems: list[str]) -> str:
    if vendor == "nvidia":
        mib = int_label(labels, "nvidia.com/gpu.memory", problems)
        return f"{round(mib / 1024, 1):g}" if mib else ""
    source = {"amd": "amd.com/gpu.vram", "huawei": "mind-cluster/npu-chip-memory"}.get(vendor)
    value = labels.get(source or "", "")
    match = re.match(r"^(\d+(?:\.\d+)?)G$", value)
    if value and not match:
        problems.append(f"label {source}={value!r} is not <number>G; ignored")
    return match.group(1) if match else ""


def _version(labels: dict[str, str], full: str, parts: list[str], problems: list[str]) -> str:
    if labels.get(full):
        return labels[full]
    values = [labels.get(p) for p in parts]
    if not values[0]:
        return ""
    present = [v for v in values if v]
    if not all(v.isdigit() for v in present) or len(present) < 2:
        problems.append(f"labels {', '.join(p for p in parts if labels.get(p))} do not form a version ({'.'.join(present)}); ignored")
        return ""
    return ".".join(present)


def node_stack(labels: dict[str, str], vendor: str, problems: list[str] | None = None) -> dict | None:
    """{"driver": …, "runtime": {"name": "cuda", "version": "12.2"}} from device-plugin labels."""
    problems = problems if problems is not None else []
    driver, runtime = "", None
    if vendor == "nvidia":
        p = "nvidia.com/cuda."
        driver = _version(
            labels, p + "driver-version.full", [p + "driver-version.major", p + "driver-version.minor", p + "driver-version.revision"], problems
        )
        driver = driver or _version(labels, "", [p + "driver.major", p + "driver.minor", p + "driver.rev"], problems)
        cuda = _version(labels, p + "runtime-version.full", [p + "runtime-version.major", p + "runtime-version.minor"], problems)
        cuda = cuda or _version(labels, "", [p + "runtime.major", p + "runtime.minor"], problems)
        runtime = {"name": "cuda", "version": cuda} if cuda else None
    elif vendor == "huawei":
        driver = labels.get("huawei.com/driver.version", "")
    elif vendor == "amd":
        driver = labels.get("amd.com/gpu.driver-version", "")
    elif vendor == "cambricon":
        driver = labels.get("DriverVersion", "").removeprefix("v")
    if not driver and not runtime:
        return None
    return {"driver": driver, **({"runtime": runtime} if runtime else {})}


# ----------------------------------------------------------------------------- pods → used


def pod_requests(pod: dict) -> dict[str, Decimal]:
    """Effective extended-resource requests of a pod, by the kubelet's rule: app containers
    plus restartable-init (sidecar) containers, or the largest ordinary init container
    (plus the sidecars started before it), whichever is larger. Requests default to limits."""

    def requests(container: dict) -> Counter[str]:
        res = container.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        return Counter({r: parse_quantity(q) for r, q in merged.items() if "/" in r and not r.split("/", 1)[0].endswith("kubernetes.io")})

    spec = pod.get("spec") or {}
    apps: Counter[str] = Counter()
    for container in spec.get("containers") or []:
        apps.update(requests(container))
    sidecars: Counter[str] = Counter()
    peak: Counter[str] = Counter()
    for container in spec.get("initContainers") or []:
        req = requests(container)
        if container.get("restartPolicy") == "Always":
            sidecars.update(req)
        else:
            for r, q in req.items():
                peak[r] = max(peak[r], q + sidecars[r])
    return {r: max(apps[r] + sidecars[r], peak[r]) for r in set(apps) | set(sidecars) | set(peak)}


def _is_workload(pod: dict) -> bool:
    """DaemonSet and static (mirror) pods stay on a drained node; anything else is workload."""
    meta = pod.get("metadata") or {}
    mirror = "kubernetes.io/config.mirror" in (meta.get("annotations") or {})
    return not mirror and not any(o.get("kind") == "DaemonSet" for o in meta.get("ownerReferences") or [])


def apply_pods(mappings: dict[str, NodeMapping], pods: list[dict], problems: list[tuple[str, str]]) -> None:
    """Add used counts (and DRAINED for cordoned nodes without workload pods) from bound pods."""
    requested: dict[str, Counter[str]] = {name: Counter() for name in mappings}
    workload: Counter[str] = Counter()
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name not in mappings or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue  # the field selector already excludes these; a server that ignores it must not skew counts
        try:
            requested[node_name].update(pod_requests(pod))
        except ValueError as exc:
            meta = pod.get("metadata") or {}
            problems.append((f"pod {meta.get('namespace', '')}/{meta.get('name', '')}: {exc}; its requests are not counted", node_name))
        workload[node_name] += _is_workload(pod)
    for name, mapping in mappings.items():
        node, used, facts = mapping.node, Counter(), {}
        for resource, quantity in requested[name].items():
            target = mapping.resources.get(resource)
            if target is not None:
                used[target.model] += math.ceil(quantity)
            elif resource in SHARE_FACTS or ASCEND_FACT_RE.match(resource):
                facts[resource] = f"{quantity.normalize():f}"
        node.used = {m: min(n, node.devices.get(m, 0)) for m, n in sorted(used.items()) if n > 0}
        if facts:
            node.extra["share_requests"] = facts
        node.extra["workload_pods"] = workload[name]
        if node.state == NodeState.DRAINING and workload[name] == 0:
            node.state, node.reason = NodeState.DRAINED, node.reason.replace("cordoned", "cordoned and empty", 1)


# ----------------------------------------------------------------------------- observation


def _grouped(problems: list[tuple[str, str]]) -> list[str]:
    """One warning per distinct problem, naming the nodes (a big cluster repeats them)."""
    nodes: dict[str, list[str]] = {}
    for message, node in problems:
        nodes.setdefault(message, []).extend([node] if node and node not in nodes.get(message, []) else [])
    out = []
    for message, names in nodes.items():
        if len(names) <= 1:
            out.append(f"node {names[0]}: {message}" if names else message)
        else:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            out.append(f"{len(names)} nodes ({shown}): {message}")
    return out


def build_observation(
    nodes: list[dict],
    pods: list[dict] | None,
    catalog: DeviceCatalog,
    overrides: dict[str, str] | None = None,
    node_group_label: str = "",
    warnings: list[str] | None = None,
) -> InventoryObservation:
    """The whole mapping from API objects to an observation. `pods=None`: used counts not seen."""
    problems: list[tuple[str, str]] = []
    mappings: dict[str, NodeMapping] = {}
    for obj in nodes:
        mapping = map_node(obj, catalog, overrides, node_group_label)
        mappings[mapping.node.name] = mapping
        problems.extend((p, mapping.node.name) for p in mapping.problems)
    sees = set(KubernetesConnector.sees)
    if pods is None:
        sees.discard(base.SEES_USED)
    else:
        apply_pods(mappings, pods, problems)
    return InventoryObservation(
        connector=KIND,
        sees=frozenset(sees),
        nodes=[m.node for m in mappings.values()],
        warnings=[*(warnings or []), *_grouped(problems)],
        extra={"nodes": len(mappings), "pods_counted": None if pods is None else len(pods)},
    )


# ----------------------------------------------------------------------------- the API


class KubernetesConnector(InventoryConnector):
    """Lists nodes (and bound pods, for used counts) through the official Python client."""

    kind = KIND
    sees = frozenset({base.SEES_NODES, base.SEES_DEVICES, base.SEES_USED, base.SEES_STATES, base.SEES_LABELS, base.SEES_TAINTS})
    sees |= {base.SEES_STACK, base.SEES_PARTITIONS}  # all of them; an observation drops `used` when pods are not readable

    def __init__(self, config: dict[str, str], catalog: DeviceCatalog) -> None:
        self.config = {k: str(v) for k, v in (config or {}).items()}
        self.catalog = catalog
        self.overrides = parse_overrides(self.config.get("resource_models", ""))
        try:
            self.timeout_s = float(self.config.get("timeout_s", "10"))
            self.page_size = int(self.config.get("page_size", "500"))
        except ValueError as exc:
            raise ConnectorError(f"kubernetes backend_config: {exc}") from exc
        if self.timeout_s <= 0 or self.page_size <= 0:
            raise ConnectorError("kubernetes backend_config: timeout_s and page_size must be positive")
        host = self.config.get("host", "")
        if host and not re.match(r"^https?://", host):
            raise ConnectorError(f"kubernetes backend_config: host {host!r} must start with https:// or http://")
        self.count_used = self.config.get("count_used", "true").strip().lower() not in ("false", "0", "no", "off")
        self.where = where(self.config)

    def _get_json(self, call, **kwargs) -> dict:
        # Raw JSON, not the client's models: the mapping works on API-shaped dicts (the same as
        # the fixtures), and stays independent of how a client release types its models.
        response = call(_preload_content=False, _request_timeout=self.timeout_s, **kwargs)
        return json.loads(response.data)

    def _list(self, call, k8s, **kwargs) -> list[dict]:
        items: list[dict] = []
        token, restarted = None, False
        for _ in range(100_000):
            try:
                page = self._get_json(call, limit=self.page_size, _continue=token, **kwargs)
            except k8s.ApiException as exc:
                if exc.status == 410 and token and not restarted:  # continue token expired: start the list again, once
                    items, token, restarted = [], None, True
                    continue
                raise
            items.extend(page.get("items") or [])
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
        raise ConnectorError("kubernetes: the list never ended (continue tokens kept coming)")

    def fetch(self) -> InventoryObservation:
        k8s = import_client("connector", ConnectorError)
        api_client = make_api_client(k8s, self.config, ConnectorError)
        warnings: list[str] = []
        pods: list[dict] | None = None
        try:
            version = self._get_json(k8s.client.VersionApi(api_client).get_code)
            core = k8s.client.CoreV1Api(api_client)
            nodes = self._list(core.list_node, k8s, label_selector=self.config.get("label_selector") or None)
            if self.count_used:
                try:
                    pods = self._list(core.list_pod_for_all_namespaces, k8s, field_selector=POD_FIELD_SELECTOR)
                except k8s.ApiException as exc:
                    warnings.append(f"pods not readable, so used counts are not reported: {api_error(exc, FORBIDDEN_HINT)}")
        except k8s.ApiException as exc:
            raise ConnectorError(f"kubernetes API {self.where}: {api_error(exc, FORBIDDEN_HINT)}") from exc
        except (k8s.HTTPError, OSError) as exc:
            raise ConnectorError(f"kubernetes API {self.where} unreachable: {exc}") from exc
        except (ValueError, TypeError) as exc:  # not JSON, or a client-side argument check
            raise ConnectorError(f"kubernetes API {self.where}: unexpected answer: {exc}") from exc
        finally:
            api_client.close()
        obs = build_observation(nodes, pods, self.catalog, self.overrides, self.config.get("node_group_label", ""), warnings)
        obs.extra.update(server_version=version.get("gitVersion", ""), label_selector=self.config.get("label_selector", ""))
        return obs
