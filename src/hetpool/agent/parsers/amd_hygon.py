"""AMD and Hygon: `rocm-smi --showallinfo --json` (also DTK's rocm-smi on Hygon DCUs) and
the `hy-smi` table.

rocm-smi renamed keys between releases ("Card series" ≤ 6.0, "Card Series" ≥ 6.1, plus
"Device Name"), so keys are looked up case-insensitively. "Driver version" under
"system" is the amdgpu kernel driver, not the ROCm release.
"""

from __future__ import annotations

import json
import re

from hetpool.agent.discovery import DiscoveredDevice, Discovery, map_model, parser
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import Vendor

_CARD = re.compile(r"^card(\d+)$")
_BRACKETED = re.compile(r"\[([^\]]+)\]")


def _lower(d: dict) -> dict[str, str]:
    return {str(k).strip().lower(): str(v).strip() for k, v in d.items()}


def _first(facts: dict[str, str], *keys: str) -> str | None:
    for key in keys:
        value = facts.get(key.lower())
        if value and value.upper() not in ("N/A", "NA"):
            return value
    return None


def _int(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def _map(name: str, vendor: Vendor, catalog: DeviceCatalog, warnings: list[str]) -> str:
    """The whole name, then the marketing name in brackets ("Arcturus GL-XL [Instinct MI100]")."""
    bracketed = _BRACKETED.findall(name)
    for candidate in (name, *bracketed):
        match = catalog.match_product(candidate, vendor)
        if match is not None:
            return match.name
    return map_model(bracketed[-1] if bracketed else name, vendor, catalog, warnings)


@parser("rocm-smi-json")
def parse_rocm_smi_json(text: str, catalog: DeviceCatalog) -> Discovery:
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise SpecError(f"rocm-smi-json: expected `rocm-smi --showallinfo --json` output (a JSON object); not JSON: {exc}") from None
    cards = sorted(((int(m.group(1)), v) for k, v in data.items() if (m := _CARD.match(k)) and isinstance(v, dict))) if isinstance(data, dict) else []
    if not cards:
        raise SpecError('rocm-smi-json: expected a JSON object with "card0", "card1", ... entries (`rocm-smi --showallinfo --json`)')
    system = _lower(data.get("system") or {})
    out = Discovery(tool="rocm-smi-json", driver_version=_first(system, "Driver version"))
    for index, raw in cards:
        out.devices.append(_card(index, _lower(raw), catalog, out.warnings))
    rocm = _first(system, "ROCm version", "ROCm")
    dtk = _first(system, "DTK version", "DTK")
    if dtk:
        out.runtime = {"name": "dtk", "version": dtk}
    elif rocm:
        out.runtime = {"name": "rocm", "version": rocm}
    return out


def _card(index: int, facts: dict[str, str], catalog: DeviceCatalog, warnings: list[str]) -> DiscoveredDevice:
    card_vendor = _first(facts, "Card Vendor") or ""
    hygon = any(word in card_vendor.lower() for word in ("haiguang", "hygon"))
    vendor = Vendor.HYGON if hygon else Vendor.AMD
    name = _first(facts, "Card Series", "Device Name", "Card Model", "Device ID", "GPU ID") or ("DCU" if hygon else "GPU")
    total_b, used_b = _int(_first(facts, "VRAM Total Memory (B)")), _int(_first(facts, "VRAM Total Used Memory (B)"))
    total = total_b // 2**20 if total_b is not None else _int(_first(facts, "vram Total Memory (MiB)"))
    used = used_b // 2**20 if used_b is not None else _int(_first(facts, "vram Total Used Memory (MiB)"))
    util = _first(facts, "GPU use (%)", "DCU use (%)")
    extra = {"card_vendor": card_vendor} if card_vendor else {}
    for key in ("Device ID", "GPU ID", "GFX Version", "VBIOS version", "Card SKU"):
        if (value := _first(facts, key)) is not None:
            extra[key.lower().replace(" ", "_")] = value
    return DiscoveredDevice(
        vendor=vendor.value,
        model=_map(name, vendor, catalog, warnings),
        name=name,
        index=index,
        memory_mib=total,
        memory_used_mib=used,
        bus_id=_first(facts, "PCI Bus") or "",
        uuid=_first(facts, "Unique ID") or "",
        utilisation_pct=float(util) if util and _int(util) is not None else None,
        extra=extra,
    )


_HY_HEADER = re.compile(r"^\s*DCU\s+Temp\s+AvgPwr\b")
_HY_SERIES = re.compile(r"^\s*[DH]CU\[(\d+)\]\s*:\s*Card Series:\s*(\S.*?)\s*$", re.MULTILINE)


@parser("hy-smi")
def parse_hy_smi(text: str, catalog: DeviceCatalog) -> Discovery:
    """The default `hy-smi` table; `DCU[0] : Card Series: K100_AI` lines, where present
    (`hy-smi --showproductname`), name the model."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if _HY_HEADER.match(line)), None)
    if header is None:
        raise SpecError("hy-smi: expected the `hy-smi` table (a 'DCU  Temp  AvgPwr  Perf  PwrCap  VRAM%  DCU%  Mode' header)")
    columns = lines[header].split()
    names = {int(i): n for i, n in _HY_SERIES.findall(text)}
    out = Discovery(tool="hy-smi")
    for line in lines[header + 1 :]:
        values = line.split()
        if not values or not values[0].isdigit():
            if values and values[0].startswith("="):
                break
            continue
        row = dict(zip(columns, values, strict=False))
        index = int(row["DCU"])
        name = names.get(index, "DCU")
        vram = _int(row.get("VRAM%", "").rstrip("%"))
        busy = row.get("DCU%", "").rstrip("%")
        extra: dict = {"vram_used_pct": vram} if vram is not None else {}
        for column, key, unit in (("Temp", "temperature_c", "C"), ("AvgPwr", "power_w", "W"), ("PwrCap", "power_cap_w", "W")):
            value = row.get(column, "").removesuffix(unit)
            if value.replace(".", "", 1).isdigit():
                extra[key] = float(value)
        for column in ("Perf", "Mode"):
            if column in row:
                extra[column.lower()] = row[column]
        out.devices.append(
            DiscoveredDevice(
                vendor=Vendor.HYGON.value,
                model=map_model(name, Vendor.HYGON, catalog, out.warnings),
                name=name,
                index=index,
                utilisation_pct=float(busy) if busy.replace(".", "", 1).isdigit() else None,
                extra=extra,
            )
        )
    if not out.devices:
        raise SpecError("hy-smi: found the `hy-smi` header but no DCU rows")
    return out
