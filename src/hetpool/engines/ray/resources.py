"""Ray resource names <-> catalog device models, one convention for the inventory (resource ->
model, rules in inventory.py's module doc) and the compute side (model -> the resource to request)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import unknown_model

# Ray's own accelerator resources (ray/_private/accelerators/*: get_resource_name()) -> device
# class; Ray sets their visible-devices variables itself.
BUILTIN_ACCELERATORS = {
    "GPU": "gpu",
    "NPU": "npu",
    "TPU": "tpu",
    "HPU": "hpu",
    "neuron_cores": "neuron",
    "FURIOSA": "npu",
    "RBLN": "npu",
    "MBLT": "npu",
}
ACCELERATOR_TYPE_LABEL = "ray.io/accelerator-type"
ACCELERATOR_TYPE_PREFIX = "accelerator_type:"
# Prefixes of `<CLASS>_<PRODUCT>` names, lower-cased; the values are Slurm GRES names in the catalog.
CLASS_PREFIXES = {"gpu": "gpu", "npu": "npu", "mlu": "mlu", "dcu": "dcu", "xpu": "xpu", "dpu": "dpu", "tpu": "tpu", "hpu": "hpu"}
NOT_ACCELERATORS = {"CPU", "memory", "object_store_memory"}
# Placement-group reservations ("NPU_group_<pg id>", "NPU_group_0_<pg id>", "bundle_group_…"), not
# hardware. Ray's own pattern takes any alphanumeric tail; a PG id is 36 hex digits, so this one
# does not swallow a custom resource that merely contains "_group_".
_PG_RESOURCE = re.compile(r"^.+_group_(\d+_)?[0-9a-f]{32,}$")
# Leading family words in accelerator-type strings ("Ascend910B4", "AMD-Instinct-MI300X").
_FAMILY_WORDS = re.compile(r"^(ascend|nvidia|amd[-_ ]?instinct|amd|instinct|tesla)[-_ ]?", re.IGNORECASE)


@dataclass(frozen=True)
class RayNode:
    node_id: str
    name: str
    ip: str
    resources: dict[str, float]
    accelerator_types: list[str]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def is_ignored_resource(name: str) -> bool:
    """Resources that never stand for an accelerator (rule 2)."""
    return name in NOT_ACCELERATORS or name.startswith(("node:", ACCELERATOR_TYPE_PREFIX)) or bool(_PG_RESOURCE.match(name))


class ResourceMapper:
    """Ray resource names -> catalog models by the module's convention; collects warnings."""

    def __init__(self, catalog: DeviceCatalog | None, overrides: dict[str, str] | None = None) -> None:
        self.catalog = catalog
        self.overrides = {k.lower(): v for k, v in (overrides or {}).items()}
        self.warnings: list[str] = []
        self._warned: set[str] = set()

    def _warn(self, text: str) -> None:
        if text not in self._warned:  # once per fetch, not once per node
            self._warned.add(text)
            self.warnings.append(text)

    def _devices(self, cls: str) -> list:
        """Catalog device models (never CPUs) of a class: GRES name or device class ("" = any)."""
        if self.catalog is None:
            return []
        models = [m for m in self.catalog.all() if m.device_class.value != "cpu"]
        return [m for m in models if m.slurm_gres.split(":")[0] == cls or m.device_class.value == cls] if cls else models

    def product_model(self, product: str, cls: str = "", family: bool = True) -> str | None:
        """A catalog model for a product / accelerator-type string within a class, or None."""
        product = product.strip()
        devices = self._devices(cls)
        found = self.catalog.match_product(product) if product and self.catalog is not None else None
        if found is not None and found in devices:
            return found.name
        for candidate in dict.fromkeys([_slug(product), _slug(_FAMILY_WORDS.sub("", product))]):
            # A bare number ("64", "80") names no product; without this "64" would be cpu-x86-64's suffix.
            if not (re.search(r"[a-z]", candidate) and re.search(r"[0-9]", candidate)):
                continue
            by_name = [m for m in devices if m.name == candidate or m.name.endswith("-" + candidate)]
            if len(by_name) == 1:
                return by_name[0].name
            if not family:
                continue
            shared = [m for m in devices if m.slurm_gres.split(":")[-1] == candidate.replace("-", "")]
            if shared:
                if len(shared) > 1:
                    self._warn(
                        f"ray: {product!r} matches {', '.join(m.name for m in shared)}; counted as {shared[0].name} "
                        f"(set backend_config.resource_models to choose)"
                    )
                return shared[0].name
        return None

    def model_for(self, resource: str, accelerator_types: list[str]) -> str | None:
        """The catalog (or unknown-…) model for one resource of a node; None = not an accelerator."""
        if resource.lower() in self.overrides:
            return self.overrides[resource.lower()]
        if is_ignored_resource(resource):
            return None
        if resource in BUILTIN_ACCELERATORS:
            cls = BUILTIN_ACCELERATORS[resource]
            for accel in accelerator_types:
                model = self.product_model(accel, cls if self._devices(cls) else "")
                if model:
                    return model
            types = ", ".join(accelerator_types)
            why = f" (the node's accelerator type {types} names no {cls} in the catalog)" if types else " (the node has no accelerator type)"
            return self._unknown(resource, why)
        # Rule 4: no family guess for a bare name, so an unrelated custom resource is not taken for a device.
        whole = self.product_model(resource, family=False)
        if whole is not None:
            return whole
        prefix, sep, product = resource.partition("_")
        if sep and prefix.lower() in CLASS_PREFIXES:
            cls = CLASS_PREFIXES[prefix.lower()]
            model = self.product_model(product, cls if self._devices(cls) else "")
            return model or self._unknown(resource, f" ({product!r} is not in the catalog)")
        return None

    def _unknown(self, resource: str, why: str) -> str:
        model = unknown_model("ray", resource)
        self._warn(f"ray: resource {resource!r} counted as {model}{why}; set backend_config.resource_models to name its model")
        return model


def accelerator_types_of(node: dict) -> list[str]:
    """The node's accelerator types: label first, then `accelerator_type:<T>` resources."""
    types: list[str] = []
    label = (node.get("labels") or {}).get(ACCELERATOR_TYPE_LABEL)
    if label:
        types.append(label)
    for resource in node.get("resources_total") or {}:
        if resource.startswith(ACCELERATOR_TYPE_PREFIX) and resource[len(ACCELERATOR_TYPE_PREFIX) :] not in types:
            types.append(resource[len(ACCELERATOR_TYPE_PREFIX) :])
    return types


class ResourceNames:
    """Catalog model -> Ray resource name for the compute side: `ResourceMapper` run in reverse."""

    def __init__(self, catalog: DeviceCatalog | None, overrides: dict[str, str]) -> None:
        self.overrides = overrides  # as written: a resource is requested spelled as configured
        self._mapper = ResourceMapper(catalog, overrides)

    def model_of(self, resource: str, accelerator_types: list[str]) -> str | None:
        """The catalog model a node's resource stands for (None: not an accelerator / unknown)."""
        model = self._mapper.model_for(resource, accelerator_types)
        if model is not None and model.startswith("unknown-") and resource.lower() not in self._mapper.overrides:
            return None
        return model

    def resource_for(self, model: str, nodes: list[RayNode]) -> str | None:
        """The resource to request for `model` on these nodes: an override first, else the one
        resource that the nodes' own names map to the model (built-in names last)."""
        overrides = [r for r, m in self.overrides.items() if m == model]
        if overrides:
            present = {r.lower(): r for n in nodes for r in n.resources}
            for resource in overrides:  # spelled as on the node when Ray has it (names are case-sensitive there)
                if resource.lower() in present:
                    return present[resource.lower()]
            return overrides[0]
        found = sorted({r for n in nodes for r in n.resources if self.model_of(r, n.accelerator_types) == model})
        custom = [r for r in found if r not in BUILTIN_ACCELERATORS]
        return (custom or found or [None])[0]
