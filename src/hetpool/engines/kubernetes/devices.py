"""Kubernetes device mapping: which catalog model (or `unknown-…` placeholder) a node's
extended resources stand for, with Kubernetes quantities, HAMi register annotations, MIG /
vNPU / MIM slices and shared devices (the rules are in inventory.py's module doc)."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from hetpool.catalog.devices import DeviceCatalog, normalize_product
from hetpool.engines.base import ConnectorError, unknown_model

_VENDOR_DOMAINS = {f"{v}.com": v for v in ("nvidia", "amd", "huawei", "cambricon", "hygon", "kunlunxin")}
# Share-size and share-count resources (HAMi, Volcano, Cambricon sMLU): facts about sharing, never devices.
SHARE_FACTS = {
    **dict.fromkeys(["nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores", "nvidia.com/priority"], "hami"),
    **dict.fromkeys(["amd.com/gpumem", "amd.com/gpucores", "hygon.com/dcumem", "hygon.com/dcucores"], "hami"),
    **dict.fromkeys(["cambricon.com/mlu.smlu.vmemory", "cambricon.com/mlu.smlu.vcore", "kunlunxin.com/vxpu", "kunlunxin.com/vxpu-memory"], "hami"),
    **dict.fromkeys(["cambricon.com/mlu.vcore", "cambricon.com/mlu.vmemory"], "dynamic-smlu"),
    **dict.fromkeys(["volcano.sh/vgpu-number", "volcano.sh/vgpu-memory", "volcano.sh/vgpu-memory-percentage", "volcano.sh/vgpu-cores"], "volcano"),
}
ASCEND_FACT_RE = re.compile(r"^huawei\.com/Ascend[\w-]+?-(memory|core)$")  # HAMi per-chip share sizes
_ASCEND_HEALTH_RE = re.compile(r"^huawei\.com/Ascend\w*-(Unhealthy|NetworkUnhealthy|Recovering|Fault)$")
_ASCEND_VNPU_RE = re.compile(r"^huawei\.com/(Ascend\w+?)-(\d+c[\w.]*|vir\w*)$")
_MIG_RE = re.compile(r"^nvidia\.com/mig-(\d+g\.\d+gb)$")
_MIG_PRODUCT_RE = re.compile(r"^(.*?)[-_ ]MIG[-_ ](\d+g\.\d+gb)$", re.IGNORECASE)  # GFD product under MIG "single"
_MIM_RE = re.compile(r"^cambricon\.com/(mlu\w*)\.mim-(.+)$")
_SHARED_RE = re.compile(r"^(.+?)\.(shared?)$")  # nvidia.com/gpu.shared (renameByDefault), cambricon.com/mlu370.share
_ACCEL_RE = re.compile(r"gpu|npu|xpu|mlu|dcu|tpu|gcu|neuron|gaudi|ascend|accelerator|^va$", re.IGNORECASE)
_HAMI_REGISTER_RE = re.compile(r"^hami\.io/node-(.*register.*)$")
PRODUCT_LABELS = {
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


@dataclass
class DeviceResource:
    """How one extended resource on one node counts toward a catalog model."""

    model: str
    shares_per_device: int = 1  # > 1: the resource counts shares of a device (HAMi split, replicas)


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


class Resolver:
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


def vendor_of(resource: str) -> str:
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
class MappedDevices:
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


def map_devices(labels: dict, annotations: dict, capacity: dict, allocatable: dict, resolver: Resolver, problems: list[str]) -> MappedDevices:
    hami = hami_devices(annotations)
    replicas = int_label(labels, "nvidia.com/gpu.replicas", problems) or 1
    out = MappedDevices()
    for resource in sorted(set(capacity) | set(allocatable)):
        if "/" not in resource or resource.split("/", 1)[0].endswith("kubernetes.io"):
            continue  # cpu, memory, pods, ephemeral-storage, hugepages-*: not devices
        cap, alloc = capacity.get(resource), allocatable.get(resource, capacity.get(resource))
        count, total = _count(alloc, resource, problems), _count(cap, resource, [])
        if total == 0 and count == 0:
            continue  # a device plugin that went away leaves its resource at 0
        vendor = vendor_of(resource)
        if resource in SHARE_FACTS or ASCEND_FACT_RE.match(resource):
            out.sharing.add(SHARE_FACTS.get(resource, "hami"))
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


def int_label(labels: dict[str, str], key: str, problems: list[str]) -> int | None:
    value = labels.get(key)
    if value is not None and not value.strip().isdigit():
        problems.append(f"label {key}={value!r} is not a whole number; ignored")
    return int(value) if value is not None and value.strip().isdigit() else None
