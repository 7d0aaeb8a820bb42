"""Kubernetes inventory connector: nodes, typed accelerators, usage, states, labels, stack.

Uses the official `kubernetes` client (`pip install 'hetpool[kubernetes]'`), imported in `fetch()`
only. The mapping is pure functions over API-shaped dicts (`map_node`, `pod_requests`,
`build_observation`); the HTTP part is tested against a recorded-protocol fake API server
(tests/connectors/k8s_fake.py), as no kube-apiserver can run in this project's CI.

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
import os
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace

from hetpool.catalog.devices import DeviceCatalog, normalize_product
from hetpool.connectors import base
from hetpool.connectors.base import ConnectorError, InventoryConnector, InventoryObservation, NodeState, ObservedNode, unknown_model

KIND = "kubernetes"
INSTALL_HINT = "pip install 'hetpool[kubernetes]'"
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
_VENDOR_DOMAINS = {f"{v}.com": v for v in ("nvidia", "amd", "huawei", "cambricon", "hygon", "kunlunxin")}
# Share-size and share-count resources (HAMi, Volcano, Cambricon sMLU): facts about sharing, never devices.
_SHARE_FACTS = {
    **dict.fromkeys(["nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority"], "hami"),
    **dict.fromkeys(["amd.com/gpumem", "amd.com/gpucores", "hygon.com/dcumem", "hygon.com/dcucores"], "hami"),
    **dict.fromkeys(["cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"], "hami"),
    **dict.fromkeys(["cambricon.com/mlu.vcore", "cambricon.com/mlu.vmemory"], "dynamic-smlu"),
    **dict.fromkeys(["volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage", "volcano.sh/vgpu-cores"], "volcano"),
}
_ASCEND_FACT_RE = re.compile(r"^huawei\.com/Ascend[\w-]+?-(memory|core)$")  # HAMi per-chip share sizes
_ASCEND_HEALTH_RE = re.compile(r"^huawei\.com/Ascend\w*-(Unhealthy|NetworkUnhealthy|Recovering|Fault)$")
_ASCEND_VNPU_RE = re.compile(r"^huawei\.com/(Ascend\w+?)-(\d+c[\w.]*|vir\w*)$")
_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")
_MIG_PRODUCT_RE = re.compile(r"^(.*?)[-_ ]MIG[-_ ](\d+g\.\d+gb)$", re.IGNORECASE)  # GFD product under MIG "single"
_MIM_RE = re.compile(r"^cambricon\.com/(mlu\w*)\.mim-(.+)$")
_SHARED_RE = re.compile(r"^(.+?)\.(shared?)$")  # nvidia.com/gpu.shared (renameByDefault), cambricon.com/mlu370.share
_ACCEL_RE = re.compile(r"gpu|npu|xpu|mlu|dcu|tpu|gcu|neuron|gaudi|ascend|accelerator|^va$", re.IGNORECASE)
_HAMI_REGISTER_RE = re.compile(r"^hami\.io/node-(.*register.*)$")
_PRODUCT_LABELS = {
    "nvidia": "nvidia.com/gpu.product",
    "huawei": "node.kubernetes.io/npu.chip.name",
    "amd": "amd.com/gpu.product-name",
    "cambricon": "Model",
}
_VENDOR_WORD_RE = re.compile(r"^((nvidia|amd|huawei|cambricon|hygon|kunlunxin)[-_ ]+)+", re.IGNORECASE)

_SUFFIXES = {
    **{s: Decimal(10) ** e for s, e in {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}.items()},
    **{s: Decimal(2) ** e for s, e in {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}.items()},
}
_QUANTITY_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]))?$")


# ----------------------------------------------------------------------------- pure parsing


def parse_quantity(value: str | int | float) -> Decimal:
    """A Kubernetes quantity ("16", "15500m", "65536Ki", "64Gi", "1e3") as a Decimal."""
    match = _QUANTITY_RE.match(str(value).strip())
    if not match:
        raise ValueError(f"not a Kubernetes quantity: {value!r}")
    number, exponent, suffix = match.groups()
    return Decimal(number) * (Decimal(10) ** int(exponent[1:]) if exponent else _SUFFIXES[suffix or ""])


def cpu_cores(value: str) -> int:
    """Whole cores ("15500m" → 15): hetpool places whole cores."""
    return int(parse_quantity(value))


def memory_gb(value: str) -> float:
    """Bytes → GiB, as the host agent counts memory_gb."""
    return round(float(parse_quantity(value) / Decimal(2**30)), 3)


def parse_overrides(text: str) -> dict[str, str]:
    """`resource_models`: "nvidia.com/gpu=nvidia-a100-80g,910B3=ascend-910b3" or a JSON object."""
    text = (text or "").strip()
    if not text:
        return {}
    if text.startswith("{"):
        try:
            data = json.loads(text)
            return {str(k).strip(): v.strip() for k, v in data.items()}
        except (ValueError, AttributeError) as exc:
            raise ConnectorError(f"resource_models: not a JSON object of names to model names: {exc}") from exc
    pairs = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, model = item.partition("=")
        if not sep or not key.strip() or not model.strip():
            raise ConnectorError(f"resource_models: {item!r} is not key=model")
        pairs[key.strip()] = model.strip()
    return pairs


def _int_label(labels: dict[str, str], key: str, problems: list[str]) -> int | None:
    value = labels.get(key)
    if value is not None and not value.strip().isdigit():
        problems.append(f"label {key}={value!r} is not a whole number; ignored")
    return int(value) if value is not None and value.strip().isdigit() else None


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


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
class DeviceResource:
    """How one extended resource on one node counts toward a catalog model."""

    model: str
    shares_per_device: int = 1  # > 1: the resource counts shares of a device (HAMi split, replicas)


@dataclass
class NodeMapping:
    """A node as observed, plus what the pods pass needs to add used counts."""

    node: ObservedNode
    resources: dict[str, DeviceResource] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)  # per-node warnings, grouped across nodes later


@dataclass
class _HamiDevice:
    split: int
    memory_mib: int
    device_type: str
    healthy: bool


def hami_devices(annotations: dict[str, str]) -> dict[str, list[_HamiDevice]]:
    """Devices HAMi's device plugin registered on the node, by vendor.

    Format (HAMi docs/develop/protocol.md): `hami.io/node-nvidia-register` (or
    `node-register-<type>`) = "uuid,split,memMiB,cores,type,numa,healthy:uuid,…:". Field
    counts differ between HAMi releases, so the type is the first non-numeric field after
    the split count, and the health the last boolean field.
    """
    found: dict[str, list[_HamiDevice]] = {}
    for key, value in annotations.items():
        match = _HAMI_REGISTER_RE.match(key)
        if not match or not value:
            continue
        tag = match.group(1).lower()
        vendor = next((v for k, v in (("nvidia", "nvidia"), ("mlu", "cambricon"), ("dcu", "hygon"), ("ascend", "huawei"), ("npu", "huawei"),
                                      ("xpu", "kunlunxin"), ("kunlun", "kunlunxin"), ("amd", "amd")) if k in tag), "generic")  # fmt: skip
        for entry in value.split(":"):
            items = [i.strip() for i in entry.split(",")]
            if len(items) < 5 or not items[1].isdigit():
                continue
            rest = items[2:]
            device_type = next((i for i in rest if i and not i.isdigit() and i.lower() not in ("true", "false")), "")
            flags = [i.lower() for i in rest if i.lower() in ("true", "false")]
            memory = int(rest[0]) if rest[0].isdigit() else 0
            found.setdefault(vendor, []).append(_HamiDevice(int(items[1]), memory, device_type, not flags or flags[-1] == "true"))
    return found


class _Resolver:
    """Catalog model for a device resource on one node; what it cannot settle becomes a warning."""

    def __init__(self, catalog: DeviceCatalog, overrides: dict[str, str]) -> None:
        self.catalog = catalog
        self.by_resource = {k: v for k, v in overrides.items() if "/" in k}
        self.by_product = {normalize_product(k): v for k, v in overrides.items() if "/" not in k}

    def product(self, product: str, vendor: str) -> str | None:
        if normalize_product(product) in self.by_product:
            return self.by_product[normalize_product(product)]
        for candidate in (product, _VENDOR_WORD_RE.sub("", product)):  # HAMi types read "NVIDIA-NVIDIA A100-SXM4-40GB"
            model = self.catalog.match_product(candidate)
            if model is not None and (vendor not in _VENDOR_DOMAINS.values() or model.vendor.value == vendor):
                return model.name
        return None

    def resolve(self, resource: str, vendor: str, hints: list[str], problems: list[str]) -> str:
        if resource in self.by_resource:
            return self.by_resource[resource]
        for hint in hints:
            model = self.product(hint, vendor)
            if model is not None:
                return model
        short = resource.split("/", 1)[-1]
        if hints:
            model = unknown_model(vendor, _VENDOR_WORD_RE.sub("", hints[0]))
            problems.append(
                f"{resource}: product {hints[0]!r} is not in the catalog; registered as {model} (apply a DeviceModel, or set resource_models)"
            )
            return model
        candidates = [m.name for m in self.catalog.all() if m.k8s_resource == resource]
        if len(candidates) == 1:
            return candidates[0]
        model = unknown_model(vendor, short)
        if candidates:
            problems.append(
                f"{resource}: no product label says which of {', '.join(candidates)} it is; registered as {model} "
                "(label the node, e.g. with GPU Feature Discovery, or set resource_models)"
            )
        else:
            problems.append(f"{resource}: no catalog model uses this resource; registered as {model} (set resource_models)")
        return model


def _vendor(resource: str) -> str:
    domain = resource.split("/", 1)[0]
    return _VENDOR_DOMAINS.get(domain) or domain.split(".")[0]


def _slice_model(vendor: str, parent: str | None, kind: str, profile: str) -> str:
    base = (parent or "").removeprefix("unknown-").removeprefix(f"{vendor}-")
    return unknown_model(vendor, f"{base} {kind} {profile}".strip())


def _product_hints(resource: str, vendor: str, labels: dict[str, str], hami: dict[str, list[_HamiDevice]]) -> list[str]:
    """Product names for the devices behind `resource`, most specific first."""
    short = resource.split("/", 1)[-1]
    hints: list[str] = []
    if vendor == "nvidia":
        product = labels.get("nvidia.com/gpu.product", "")
        hints.append(re.sub(r"-SHARED$", "", product, flags=re.IGNORECASE))
    elif vendor == "huawei":
        named = re.match(r"^Ascend(\w[\w-]*)$", short)
        if named and named.group(1).upper() not in ("910", "310", "310P"):  # HAMi names the chip: huawei.com/Ascend910B3
            hints.append(short)
        hints.append(labels.get("node.kubernetes.io/npu.chip.name", ""))
    elif vendor == "amd":
        hints.append(labels.get("amd.com/gpu.product-name", ""))
    elif vendor == "cambricon":
        if re.match(r"^mlu\d", short):  # --enable-device-type: cambricon.com/mlu370
            hints.append(short)
        hints.append(labels.get("Model", ""))
    hints.extend(d.device_type for d in hami.get(vendor, []))
    return list(dict.fromkeys(h for h in hints if h))


def _count(quantity: str | None, resource: str, problems: list[str]) -> int:
    try:
        return int(parse_quantity(quantity)) if quantity is not None else 0
    except ValueError:
        problems.append(f"{resource}: quantity {quantity!r} is not valid; counted as 0")
        return 0


@dataclass
class _Devices:
    """What a node's extended resources add up to (the device half of `map_node`)."""

    counts: Counter[str] = field(default_factory=Counter)  # model -> devices (whole devices and slices)
    whole: Counter[str] = field(default_factory=Counter)  # model -> whole devices only
    resources: dict[str, DeviceResource] = field(default_factory=dict)
    sharing: set[str] = field(default_factory=set)
    slicing: set[str] = field(default_factory=set)
    extra: dict = field(
        default_factory=lambda: {k: {} for k in ("resources", "shares", "slices", "share_resources", "other_resources", "unallocatable")}
    )

    def add_slice(self, resource: str, kind: str, model: str, parent: str, count: int, problems: list[str]) -> None:
        if model.startswith("unknown-"):
            problems.append(f"{resource}: {kind} slices are not catalog devices; registered as {model} (apply a DeviceModel of that name)")
        self.slicing.add(kind)
        self.extra["slices"][resource] = {"model": model, "parent": parent, "count": count}
        self.resources[resource] = DeviceResource(model)
        self.counts[model] += count


def _map_devices(labels: dict, annotations: dict, capacity: dict, allocatable: dict, resolver: _Resolver, problems: list[str]) -> _Devices:
    hami = hami_devices(annotations)
    replicas = _int_label(labels, "nvidia.com/gpu.replicas", problems) or 1
    out = _Devices()
    for resource in sorted(set(capacity) | set(allocatable)):
        if "/" not in resource or resource.split("/", 1)[0].endswith("kubernetes.io"):
            continue  # cpu, memory, pods, ephemeral-storage, hugepages-*: not devices
        cap, alloc = capacity.get(resource), allocatable.get(resource, capacity.get(resource))
        count, total = _count(alloc, resource, problems), _count(cap, resource, [])
        if total == 0 and count == 0:
            continue  # a device plugin that went away leaves its resource at 0
        vendor = _vendor(resource)
        if resource in _SHARE_FACTS or _ASCEND_FACT_RE.match(resource):
            out.sharing.add(_SHARE_FACTS.get(resource, "hami"))
            out.extra["share_resources"][resource] = alloc
            continue
        if _ASCEND_HEALTH_RE.match(resource):
            out.extra.setdefault("device_health", {})[resource] = alloc
            continue
        shared = _SHARED_RE.match(resource)
        base = shared.group(1) if shared else resource
        slice_match = _MIG_RE.match(resource) or _ASCEND_VNPU_RE.match(resource) or _MIM_RE.match(resource)
        accelerator = any(m.k8s_resource == base for m in resolver.catalog) or _ACCEL_RE.search(base.split("/", 1)[-1])
        if not (slice_match or accelerator or resource in resolver.by_resource):
            out.extra["other_resources"][resource] = cap  # rdma, kvm, fuse …: kept for operators, not devices
            continue
        out.extra["resources"][resource] = {"capacity": cap, "allocatable": alloc}
        if total > count:
            out.extra["unallocatable"][resource] = total - count
            problems.append(f"{resource}: {total - count} of {total} not allocatable (unhealthy devices?)")
        if slice_match:
            kind = {"nvidia": "mig", "huawei": "vnpu"}.get(vendor, "mim")
            parent_resource = "nvidia.com/gpu" if kind == "mig" else f"{resource.split('/')[0]}/{slice_match.group(1)}"
            parent = resolver.resolve(parent_resource, vendor, _product_hints(parent_resource, vendor, labels, hami), [])
            profile = slice_match.group(slice_match.lastindex or 1)
            out.add_slice(resource, kind, resolver.by_resource.get(resource) or _slice_model(vendor, parent, kind, profile), parent, count, problems)
            continue
        hints = _product_hints(base, vendor, labels, hami)
        mig_single = _MIG_PRODUCT_RE.match(hints[0]) if vendor == "nvidia" and hints else None
        if mig_single:  # MIG "single": nvidia.com/gpu counts slices, and the product names the profile
            parent = resolver.resolve(base, vendor, [mig_single.group(1), *hints[1:]], problems)
            model = resolver.by_resource.get(resource) or _slice_model(vendor, parent, "mig", mig_single.group(2))
            out.add_slice(resource, "mig", model, parent, count, problems)
            continue
        model = resolver.resolve(resource if resource in resolver.by_resource else base, vendor, hints, problems)
        shares = 1
        if base == "nvidia.com/gpu" and replicas > 1:  # GFD time-slicing / MPS: the count is replicas x GPUs
            shares = replicas
            out.sharing.add(labels.get("nvidia.com/gpu.sharing-strategy") or "time-slicing")
        elif hami.get(vendor):  # HAMi registers split x GPUs; the annotation says how many GPUs there are
            out.sharing.add("hami")
            split = max(d.split for d in hami[vendor])
            shares = split if split > 1 and count > len(hami[vendor]) else 1
        elif shared:
            out.sharing.add("env-share" if vendor == "cambricon" else "time-slicing")
            problems.append(f"{resource}: counts shared slots and the number of physical devices is not visible; each slot counts as a device")
        if shares > 1:
            out.extra["shares"][resource] = {"model": model, "shares": count, "shares_per_device": shares}
        out.resources[resource] = DeviceResource(model, shares)
        out.counts[model] += math.ceil(count / shares)
        out.whole[model] += math.ceil(count / shares)
    if hami:
        out.extra["hami_devices"] = {v: [vars(d) for d in ds] for v, ds in hami.items()}
    for key, value in annotations.items():
        if _ASCEND_HEALTH_RE.match(key) and value:
            out.extra.setdefault("device_health", {})[key] = value
    return out


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
    dev = _map_devices(labels, dict(meta.get("annotations") or {}), capacity, allocatable, _Resolver(catalog, overrides or {}), problems)
    ranked = dev.whole or dev.counts  # the main device: whole devices before slices, then the most of them
    main = min(ranked, key=lambda m: (-ranked[m], m), default="")
    vendor = next((_vendor(r) for r, d in dev.resources.items() if d.model == main), "")
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
    labels: dict, arch: str, main: str, vendor: str, dev: _Devices, stack: dict | None, group: str, problems: list[str]
) -> dict[str, str]:
    """The hetpool.io/... vocabulary of `LABELS` for one node."""
    hp: dict[str, str] = {"hetpool.io/arch": arch, "hetpool.io/device.count": str(dev.counts[main] if main else 0)}
    for target, sources in (
        ("hetpool.io/os", ("kubernetes.io/os",)),
        ("hetpool.io/zone", ("topology.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/zone")),
        ("hetpool.io/region", ("topology.kubernetes.io/region", "failure-domain.beta.kubernetes.io/region")),
        ("hetpool.io/instance-type", ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")),
        ("hetpool.io/mig.strategy", ("nvidia.com/mig.strategy",)),
        ("hetpool.io/device.product", (_PRODUCT_LABELS.get(vendor, ""),)),
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
        mib = _int_label(labels, "nvidia.com/gpu.memory", problems)
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
            elif resource in _SHARE_FACTS or _ASCEND_FACT_RE.match(resource):
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
        self.where = host or f"kubeconfig {self.config.get('kubeconfig') or '(default)'} context {self.config.get('context') or '(current)'}"

    def _client(self, k8s):
        """An ApiClient of its own (never the process-wide default configuration)."""
        cfg = k8s.client.Configuration()
        c = self.config
        try:
            if c.get("host"):
                cfg.host = c["host"].rstrip("/")
                token = c.get("token") or (Path(c["token_file"]).read_text().strip() if c.get("token_file") else "")
                if token:
                    cfg.api_key = {"authorization": f"Bearer {token}"}
                if c.get("ca_file"):
                    cfg.ssl_ca_cert = c["ca_file"]
                cfg.verify_ssl = not _truthy(c.get("insecure_skip_tls_verify"))
            elif _truthy(c.get("in_cluster")) or (not c.get("kubeconfig") and not c.get("context") and os.environ.get("KUBERNETES_SERVICE_HOST")):
                k8s.config.load_incluster_config(client_configuration=cfg)
            else:
                k8s.config.load_kube_config(
                    config_file=c.get("kubeconfig") or None, context=c.get("context") or None, client_configuration=cfg, persist_config=False
                )
        except (k8s.config.ConfigException, OSError, ValueError, KeyError) as exc:
            raise ConnectorError(f"kubernetes: cannot load the client configuration ({self.where}): {exc}") from exc
        cfg.retries = 0  # the sync retries next interval; a dead server must fail fast, not after urllib3's 3 retries
        return k8s.client.ApiClient(cfg)

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
        k8s = _import_client()
        api_client = self._client(k8s)
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
                    warnings.append(f"pods not readable, so used counts are not reported: {_api_error(exc)}")
        except k8s.ApiException as exc:
            raise ConnectorError(f"kubernetes API {self.where}: {_api_error(exc)}") from exc
        except (k8s.HTTPError, OSError) as exc:
            raise ConnectorError(f"kubernetes API {self.where} unreachable: {exc}") from exc
        except (ValueError, TypeError) as exc:  # not JSON, or a client-side argument check
            raise ConnectorError(f"kubernetes API {self.where}: unexpected answer: {exc}") from exc
        finally:
            api_client.close()
        obs = build_observation(nodes, pods, self.catalog, self.overrides, self.config.get("node_group_label", ""), warnings)
        obs.extra.update(server_version=version.get("gitVersion", ""), label_selector=self.config.get("label_selector", ""))
        return obs


def _import_client() -> SimpleNamespace:
    """The client modules, imported only when a Kubernetes cluster is actually synced."""
    try:
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError
    except ImportError as exc:
        raise ConnectorError(f"the Kubernetes connector needs the kubernetes client: {INSTALL_HINT} ({exc})") from exc
    return SimpleNamespace(client=client, config=config, ApiException=ApiException, HTTPError=HTTPError)


def _api_error(exc) -> str:
    """The API's own Status message, with what to do about 401 / 403."""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = str(exc.body or "")[:300]
    text = f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    if exc.status == 401:
        text += " (the token or kubeconfig credentials were rejected)"
    elif exc.status == 403:
        text += " (the identity needs RBAC get/list on nodes, and list on pods for used counts)"
    return text
