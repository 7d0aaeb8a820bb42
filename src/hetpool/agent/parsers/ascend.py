"""Huawei Ascend: `npu-smi info`, `npu-smi info -m` and `npu-smi info -i N [-c C] -t board`.

`npu-smi info` prints two table rows per chip:

    | NPU   Name      | Health | Power(W)   Temp(C)          Hugepages-Usage(page) |
    | Chip  [Device]  | Bus-Id | AICore(%)  Memory-Usage(MB) [HBM-Usage(MB)]       |

The 21.0.4 layout (Atlas 300/310) has a `Device` column and no HBM column. Chip names
may be redacted upstream (`xxx`); they still become devices, as unknown models.
"""

from __future__ import annotations

import re

from hetpool.agent.discovery import DiscoveredDevice, Discovery, map_model, parser
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import Vendor

HUAWEI = Vendor.HUAWEI
_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")
_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)")
_VERSION = re.compile(r"npu-smi\s+\S+\s+Version:\s*(\S+)")
_HEALTH = {"ok": "ok", "warning": "warning", "alarm": "abnormal", "critical": "abnormal"}


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@parser("npu-smi")
def parse_npu_smi(text: str, catalog: DeviceCatalog) -> Discovery:
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if re.search(r"\|\s*NPU\s+Name\s*\|\s*Health", line)), None)
    if header is None:
        raise SpecError("npu-smi: expected the `npu-smi info` table (a '| NPU Name | Health | ...' header); found none")
    has_hbm = "HBM-Usage" in (lines[header + 1] if header + 1 < len(lines) else "")
    out = Discovery(tool="npu-smi")
    version = _VERSION.search(text)
    out.driver_version = version.group(1) if version else None
    first: list[str] | None = None
    for line in lines[header + 2 :]:
        if "Process id" in line or "Process name" in line:
            break  # the process table follows the device table
        if not line.lstrip().startswith("|") or set(line.strip()) <= set("|+-="):
            continue
        cells = _cells(line)
        if len(cells) < 3:
            continue
        if _BUS_ID.match(cells[1]):
            if first is not None:
                out.devices.append(_chip(first, cells, has_hbm, len(out.devices), catalog, out.warnings))
            first = None
        else:
            first = cells
    if not out.devices:
        raise SpecError("npu-smi: found the `npu-smi info` header but no chip rows (two rows per chip: NPU/Name, Chip/Bus-Id)")
    return out


def _chip(first: list[str], second: list[str], has_hbm: bool, index: int, catalog: DeviceCatalog, warnings: list[str]) -> DiscoveredDevice:
    npu_id, _, name = first[0].partition(" ")
    name = name.strip()
    ids = second[0].split()
    extra: dict = {"npu_id": int(npu_id), "chip_id": int(ids[0]) if ids and ids[0].isdigit() else None}
    if len(ids) > 1 and ids[1].isdigit():
        extra["device_id"] = int(ids[1])  # the 21.0.4 layout prints the logical device id
    power_temp = first[2].split()
    if power_temp:
        extra["power_w"] = _number(power_temp[0])
    if len(power_temp) > 1:
        extra["temperature_c"] = _number(power_temp[1])
    hugepages = _PAIR.search(first[2])
    if hugepages:
        extra["hugepages_used"], extra["hugepages_total"] = int(hugepages.group(1)), int(hugepages.group(2))
    pairs = [(int(a), int(b)) for a, b in _PAIR.findall(second[2])]
    memory = pairs[0] if pairs else None
    hbm = pairs[1] if has_hbm and len(pairs) > 1 else None
    if memory is not None and hbm is not None:
        extra["ddr_used_mib"], extra["ddr_total_mib"] = memory
    used_total = hbm if hbm is not None and hbm[1] > 0 else memory
    aicore = second[2].split()[0] if second[2].split() else ""
    return DiscoveredDevice(
        vendor=HUAWEI.value,
        model=map_model(name or "npu", HUAWEI, catalog, warnings),
        name=name,
        index=index,
        memory_mib=used_total[1] if used_total else None,
        memory_used_mib=used_total[0] if used_total else None,
        health=_HEALTH.get(first[1].lower(), "unknown"),
        bus_id=second[1],
        utilisation_pct=_number(aicore),
        extra=extra,
    )


@parser("npu-smi-mapping")
def parse_npu_smi_mapping(text: str, catalog: DeviceCatalog) -> Discovery:
    """`npu-smi info -m`: NPU ID, Chip ID, Chip Logic ID, Chip Name (Mcu rows have no logic id)."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if "Chip Logic ID" in line and "Chip Name" in line), None)
    if header is None:
        raise SpecError("npu-smi-mapping: expected `npu-smi info -m` output (a 'NPU ID  Chip ID  Chip Logic ID  Chip Name' header)")
    columns = re.split(r"\s{2,}", lines[header].strip())
    out = Discovery(tool="npu-smi-mapping")
    for line in lines[header + 1 :]:
        values = re.split(r"\s{2,}", line.strip())
        if len(values) != len(columns) or not values[0].isdigit():
            continue  # blank lines, trailing links
        row = dict(zip(columns, values, strict=True))
        logic_id = row.get("Chip Logic ID", "-")
        if not logic_id.isdigit():
            continue  # the board's Mcu, not an NPU chip
        name = row.get("Chip Name", "")
        out.devices.append(
            DiscoveredDevice(
                vendor=HUAWEI.value,
                model=map_model(name, HUAWEI, catalog, out.warnings),
                name=name,
                index=int(logic_id),
                health="unknown",
                extra={"npu_id": int(row["NPU ID"]), "chip_id": int(row.get("Chip ID", "0"))},
            )
        )
    if not out.devices:
        raise SpecError("npu-smi-mapping: found the `npu-smi info -m` header but no chip rows")
    return out


@parser("npu-smi-board")
def parse_npu_smi_board(text: str, catalog: DeviceCatalog) -> Discovery:
    """`npu-smi info -i N [-c C] -t board`: `key : value` lines, one device per NPU ID
    (the board and chip views of one NPU are merged)."""
    boards: dict[int, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or line.lstrip().startswith("#"):
            continue
        key, value = key.strip(), value.strip()
        if key == "NPU ID" and value.isdigit():
            current = boards.setdefault(int(value), {})
        elif current is not None and key:
            current.setdefault(key, value)
    if not boards:
        raise SpecError("npu-smi-board: expected `npu-smi info -i N -t board` output ('NPU ID : 0' and 'key : value' lines)")
    out = Discovery(tool="npu-smi-board")
    for npu_id, facts in sorted(boards.items()):
        out.driver_version = out.driver_version or facts.get("Software Version")
        out.devices.append(_board(npu_id, facts, catalog, out.warnings))
    return out


def _board(npu_id: int, facts: dict[str, str], catalog: DeviceCatalog, warnings: list[str]) -> DiscoveredDevice:
    chip = facts.get("Chip Name", "")
    name = f"{facts.get('Chip Type', '')} {chip}".strip() if chip else f"board {facts.get('Board ID', npu_id)}"
    extra: dict = {"npu_id": npu_id}
    for key in ("Firmware Version", "Board ID", "Chip Version", "Chip Count", "Chip ID"):
        if key in facts:
            extra[key.lower().replace(" ", "_")] = facts[key]
    vendor_id = facts.get("PCI Vendor ID", "").lower().removeprefix("0x")
    device_id = facts.get("PCI Device ID", "").lower().removeprefix("0x")
    model = catalog.match_product(name, HUAWEI) or (catalog.match_product(chip, HUAWEI) if chip else None)
    if vendor_id and device_id:
        extra["pci_vendor_id"], extra["pci_device_id"] = vendor_id, device_id
        if model is None:
            by_pci = catalog.match_pci_id(f"{vendor_id}:{device_id}")
            if len(by_pci) == 1:
                model = by_pci[0]
                warnings.append(f"{name!r} is not in the device catalog; mapped to {model.name} by PCI id {vendor_id}:{device_id}")
            elif by_pci:
                extra["candidate_models"] = [m.name for m in by_pci]
    return DiscoveredDevice(
        vendor=HUAWEI.value,
        model=model.name if model is not None else map_model(name, HUAWEI, catalog, warnings),
        name=name,
        index=npu_id,
        health="unknown",
        bus_id=facts.get("PCIe Bus Info", ""),
        extra=extra,
    )
