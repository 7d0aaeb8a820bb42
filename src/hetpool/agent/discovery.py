"""The normalised result of reading a device tool's output, and the parser registry.

Each parser turns one tool's text (nvidia-smi XML/CSV, npu-smi, rocm-smi JSON, hy-smi,
cnmon, xpu-smi, lspci …) into a `Discovery`. Device names are mapped onto catalog
models; an unknown one becomes `unknown-<vendor>-<name>` (never dropped) with a warning.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

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
