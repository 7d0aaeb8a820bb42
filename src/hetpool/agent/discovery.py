"""The normalised result of reading a device tool's output, and the parser registry.

Each parser turns one tool's text (nvidia-smi XML/CSV, npu-smi, rocm-smi JSON, hy-smi,
cnmon, xpu-smi, lspci …) into a `Discovery`. Device names are mapped onto catalog
models; an unknown one becomes `unknown-<vendor>-<name>` (never dropped) with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import Vendor


@dataclass
class DiscoveredDevice:
    vendor: str  # a Vendor value
    model: str  # catalog id, or unknown-<vendor>-<name>
    name: str  # as the tool printed it
    index: int
    memory_mib: int | None = None
    health: str = "ok"  # ok | warning | abnormal | unknown
    bus_id: str = ""
    uuid: str = ""
    utilisation_pct: float | None = None
    memory_used_mib: int | None = None
    extra: dict = field(default_factory=dict)  # tool-specific facts (MIG slices, chip id, …)


@dataclass
class Discovery:
    tool: str
    devices: list[DiscoveredDevice] = field(default_factory=list)
    driver_version: str | None = None
    runtime: dict | None = None  # {"name": "cuda", "version": "12.2"}
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "device"


def map_model(name: str, vendor: Vendor, catalog: DeviceCatalog, warnings: list[str]) -> str:
    """Catalog id for a product name, or `unknown-<vendor>-<name>` with a warning."""
    match = catalog.match_product(name, vendor)
    if match is not None:
        return match.name
    name_slug = slug(name)
    if name_slug.startswith(vendor.value + "-"):  # "NVIDIA GeForce …" → not unknown-nvidia-nvidia-…
        name_slug = name_slug[len(vendor.value) + 1 :]
    unknown = f"unknown-{vendor.value}-{name_slug}"
    warnings.append(f"{name!r} is not in the device catalog; registered as {unknown}")
    return unknown


Parser = Callable[[str, DeviceCatalog], Discovery]
PARSERS: dict[str, Parser] = {}


def parser(tool: str) -> Callable[[Parser], Parser]:
    def register(fn: Parser) -> Parser:
        PARSERS[tool] = fn
        return fn

    return register


def parse_tool_output(tool: str, text: str, catalog: DeviceCatalog | None = None) -> Discovery:
    """Parse `text` as the output of `tool`. An unknown tool or an unrecognised format is
    a SpecError that says what was expected."""
    _load_parsers()
    fn = PARSERS.get(tool)
    if fn is None:
        raise SpecError(f"--tool: unknown tool {tool!r}; allowed: {', '.join(sorted(PARSERS))}")
    return fn(text, catalog or DeviceCatalog.builtin())


def _load_parsers() -> None:
    # Importing the modules registers their parsers.
    from hetpool.agent import parsers  # noqa: F401


def _identities(device: DiscoveredDevice) -> list[tuple]:
    """What tells one physical device from another across tools: its PCI bus id, its UUID,
    and for Ascend chips the (NPU id, chip id) pair that `npu-smi info`, `npu-smi info -m`
    and the board view all print."""
    keys: list[tuple] = []
    if device.bus_id:
        keys.append((device.vendor, "bus", device.bus_id.lower().removeprefix("0000:")))
    if device.uuid:
        keys.append((device.vendor, "uuid", device.uuid.lower()))
    npu_id, chip_id = device.extra.get("npu_id"), device.extra.get("chip_id")
    if npu_id is not None and chip_id is not None and str(chip_id).isdigit():
        keys.append((device.vendor, "chip", int(npu_id), int(chip_id)))
    return keys


def merge_same_devices(discoveries: list[Discovery]) -> list[Discovery]:
    """Each physical device once, however many tools reported it (e.g. `npu-smi info` and
    `npu-smi info -m` list the same chips: an 8-chip server is 8 devices, not 16). The
    first report is kept — the tools are asked in order of detail — and a later one only
    fills what the first lacks: a catalog model where it had an unknown one, memory, facts."""
    seen: dict[tuple, DiscoveredDevice] = {}  # from earlier tools only: one tool's own rows are never merged
    merged = []
    for found in discoveries:
        kept = []
        for device in found.devices:
            first = next((seen[k] for k in _identities(device) if k in seen), None)
            if first is None:
                kept.append(device)
                continue
            if first.model.startswith("unknown-") and not device.model.startswith("unknown-"):
                first.model = device.model
            first.memory_mib = first.memory_mib or device.memory_mib
            first.bus_id, first.uuid = first.bus_id or device.bus_id, first.uuid or device.uuid
            for key, value in device.extra.items():
                first.extra.setdefault(key, value)
        for device in kept:
            for key in _identities(device):
                seen.setdefault(key, device)
        merged.append(replace(found, devices=kept))
    return merged
