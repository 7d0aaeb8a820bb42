"""The device catalog: every known device model, looked up by name or by the product
name a discovery tool prints.

The built-in models ship as `data/devices.yaml`; operators add or replace models with
`DeviceModel` documents, which win by name (`DeviceCatalog.with_models`).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Iterator
from functools import lru_cache
from importlib import resources

from hetpool.core.errors import NotFoundError, SpecError
from hetpool.core.inventory import DeviceClass, DeviceModelSpec, Vendor
from hetpool.core.specs import load_yaml_documents, parse_documents

REFERENCE_MODEL = "nvidia-a100-80g"

# Suffixes that device plugins / GFD append to a product name without changing the
# model: MIG slices ("A100-SXM4-40GB-MIG-1g.5gb") and shared replicas ("-SHARED").
_SUFFIX_RE = re.compile(r"([-_ ]mig[-_ ].*|[-_ ]shared)$", re.IGNORECASE)
# Words that some tools print in front of the model and others leave out.
_VENDOR_WORDS = ("nvidia", "tesla", "geforce", "amd", "instinct", "huawei", "cambricon", "hygon", "kunlunxin", "kunlun")


def normalize_product(name: str) -> str:
    """Case-insensitive, with spaces, dashes and underscores ignored."""
    return re.sub(r"[\s_\-]+", "", name).lower()


def _strip_vendor_words(name: str) -> str:
    words = re.split(r"[\s_\-]+", name.strip())
    while words and words[0].lower() in _VENDOR_WORDS:
        words = words[1:]
    return " ".join(words)


def load_device_models_yaml(text: str, source: str) -> list[DeviceModelSpec]:
    """Parse DeviceModel documents; any other kind is an error (this is a catalog file)."""
    docs = load_yaml_documents(text, source)
    specs = parse_documents([(f"{source}[{i}]", doc) for i, doc in enumerate(docs)])
    models: list[DeviceModelSpec] = []
    for spec in specs:
        if not isinstance(spec, DeviceModelSpec):
            raise SpecError(f"{source}: only 'kind: DeviceModel' documents belong in a device catalog")
        models.append(spec)
    return models


class DeviceCatalog:
    """An immutable set of device models keyed by name."""

    def __init__(self, models: Iterable[DeviceModelSpec]) -> None:
        self._models: dict[str, DeviceModelSpec] = {}
        for model in models:
            # Later entries win, so a list "builtin + overrides" needs no special casing.
            self._models[model.name] = model
        self._by_product = self._index_products()

    # -- construction -----------------------------------------------------------------

    @classmethod
    def builtin(cls) -> DeviceCatalog:
        """The packaged catalog (parsed once per process)."""
        return _builtin_catalog()

    def with_models(self, specs: Iterable[DeviceModelSpec]) -> DeviceCatalog:
        """A new catalog with `specs` added; a spec with an existing name replaces it."""
        return DeviceCatalog([*self._models.values(), *specs])

    def _index_products(self) -> dict[str, list[str]]:
        index: dict[str, list[str]] = {}
        for model in self._models.values():
            for label in (model.name, model.display_name, *model.aliases):
                key = normalize_product(label)
                if key and model.name not in index.setdefault(key, []):
                    index[key].append(model.name)
        return index

    # -- lookups ------------------------------------------------------------------------

    def get(self, name: str) -> DeviceModelSpec:
        try:
            return self._models[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._models), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise NotFoundError(f"device model {name!r} is not in the catalog{hint}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._models

    def __iter__(self) -> Iterator[DeviceModelSpec]:
        return iter(self._models.values())

    def __len__(self) -> int:
        return len(self._models)

    def names(self) -> list[str]:
        return sorted(self._models)

    def all(self) -> list[DeviceModelSpec]:
        return sorted(self._models.values(), key=lambda m: m.name)

    def by_class(self, device_class: DeviceClass) -> list[DeviceModelSpec]:
        return [m for m in self.all() if m.device_class == device_class]

    def match_product(self, name: str, vendor: Vendor | None = None) -> DeviceModelSpec | None:
        """The model a discovery tool's product name refers to, or None.

        Exact (normalised) alias match first; then without MIG / shared suffixes; then
        without leading vendor words ("NVIDIA", "Tesla", ...). No fuzzy matching: a wrong
        guess would put devices in the wrong pool, which is worse than "unknown".
        """
        candidates = [name.strip()]
        stripped = _SUFFIX_RE.sub("", candidates[0])
        candidates.append(stripped)
        candidates.append(_strip_vendor_words(stripped))
        for candidate in candidates:
            key = normalize_product(candidate)
            if not key:
                continue
            names = self._by_product.get(key, [])
            models = [self._models[n] for n in names if vendor is None or self._models[n].vendor == vendor]
            if models:
                # An alias shared by several models is ambiguous only if it crosses
                # vendors; within one list the first (file order) is the canonical one.
                return models[0]
        return None

    def match_pci_id(self, pci_id: str) -> list[DeviceModelSpec]:
        """Models that list `vendor:device` (several 910B variants share one id)."""
        key = pci_id.strip().lower().replace("0x", "")
        return [m for m in self.all() if key in (p.lower() for p in m.pci_ids)]


@lru_cache(maxsize=1)
def _builtin_catalog() -> DeviceCatalog:
    text = resources.files("hetpool.catalog").joinpath("data/devices.yaml").read_text(encoding="utf-8")
    return DeviceCatalog(load_device_models_yaml(text, "hetpool/catalog/data/devices.yaml"))
