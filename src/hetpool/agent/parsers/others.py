"""Cambricon `cnmon`, Kunlunxin `xpu-smi` and PCI discovery from `lspci -nn`."""

from __future__ import annotations

import re

from hetpool.agent.discovery import DiscoveredDevice, Discovery, map_model, parser, slug
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import Vendor

_BUS_ID = re.compile(r"^[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]$")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _pct(text: str) -> float | None:
    value = text.replace("%", "").strip()
    return float(value) if value.replace(".", "", 1).isdigit() else None


# -- cnmon ------------------------------------------------------------------------------

_CNMON_DRIVER = re.compile(r"Driver\s+v?(\S+)")
_MIB_PAIR = re.compile(r"(\S+)\s*MiB\s*/\s*(\S+)\s*MiB")


@parser("cnmon")
def parse_cnmon(text: str, catalog: DeviceCatalog) -> Discovery:
    """`cnmon` (v5): two rows per card — `Card VF Name Firmware | Bus-Id | Util Ecc-Error`
    and `Fan Temp Pwr | Memory-Usage | Mode Compute-Mode`. Redacted values ("xxxxx MiB")
    are left empty."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if re.search(r"\|\s*Card\s+VF\s+Name", line)), None)
    if header is None or not re.search(r"CNMON", text, re.IGNORECASE):
        raise SpecError("cnmon: expected `cnmon` output (a 'CNMON vX' banner and a '| Card VF Name Firmware | Bus-Id | ...' header)")
    out = Discovery(tool="cnmon")
    if driver := _CNMON_DRIVER.search(text):
        out.driver_version = driver.group(1)
    first: list[str] | None = None
    for line in lines[header + 2 :]:
        if "Processes" in line:
            break
        cells = _cells(line)
        if len(cells) < 3 or set(line.strip()) <= set("|+-="):
            continue
        if _BUS_ID.match(cells[1]):
            first = cells
        elif first is not None and "MiB" in cells[1]:
            out.devices.append(_card(first, cells, catalog, out.warnings))
            first = None
    if not out.devices:
        raise SpecError("cnmon: found the `cnmon` header but no card rows")
    return out


def _card(first: list[str], second: list[str], catalog: DeviceCatalog, warnings: list[str]) -> DiscoveredDevice:
    ident = first[0].split()  # Card VF Name Firmware
    name = ident[2] if len(ident) > 2 else "MLU"
    extra: dict = {"vf": ident[1]} if len(ident) > 1 else {}
    if len(ident) > 3:
        extra["firmware"] = ident[3]
    util_ecc = first[2].split()
    if len(util_ecc) > 1:
        extra["ecc_errors"] = util_ecc[1]
    memory = _MIB_PAIR.search(second[1])
    used, total = (memory.group(1), memory.group(2)) if memory else ("", "")
    fan_temp = second[0].split()
    if len(fan_temp) > 1 and fan_temp[1].endswith("C"):
        extra["temperature_c"] = float(fan_temp[1][:-1])
    mode = second[2].split()
    if mode:
        extra["mode"] = mode[0]
    return DiscoveredDevice(
        vendor=Vendor.CAMBRICON.value,
        model=map_model(name, Vendor.CAMBRICON, catalog, warnings),
        name=name,
        index=int(ident[0]),
        memory_mib=int(total) if total.isdigit() else None,
        memory_used_mib=int(used) if used.isdigit() else None,
        bus_id=first[1],
        utilisation_pct=_pct(util_ecc[0]) if util_ecc else None,
        extra=extra,
    )


# -- xpu-smi ----------------------------------------------------------------------------

_MB_PAIR = re.compile(r"(\d+)\s*/\s*(\d+)\s*MB")


@parser("xpu-smi")
def parse_xpu_smi(text: str, catalog: DeviceCatalog) -> Discovery:
    """Kunlunxin `xpu-smi`/`xpu_smi`: `Runtime Version` / `Driver Version` lines, then
    `| DevID | PCI Addr | Model | SN | INODE | UseRate | L3 | Memory |`."""
    lines = text.splitlines()
    header = next((i for i, line in enumerate(lines) if re.search(r"\|\s*DevID\s*\|", line)), None)
    if header is None:
        raise SpecError("xpu-smi: expected `xpu-smi` output (a '| DevID | PCI Addr | Model | ... | Memory |' table)")
    columns = _cells(lines[header])
    out = Discovery(tool="xpu-smi")
    if driver := re.search(r"Driver Version:\s*(\S+)", text):
        out.driver_version = driver.group(1)
    if runtime := re.search(r"Runtime Version:\s*(\S+)", text):
        out.runtime = {"name": "xre", "version": runtime.group(1)}
    for line in lines[header + 1 :]:
        cells = _cells(line)
        if len(cells) != len(columns) or not cells[0].isdigit():
            continue
        row = dict(zip(columns, cells, strict=True))
        name = row.get("Model", "") or "XPU"
        memory = _MB_PAIR.search(row.get("Memory", ""))
        l3 = _MB_PAIR.search(row.get("L3", ""))
        extra = {k.lower(): row[k] for k in ("SN", "INODE") if row.get(k)}
        if l3:
            extra["l3_used_mb"], extra["l3_total_mb"] = int(l3.group(1)), int(l3.group(2))
        out.devices.append(
            DiscoveredDevice(
                vendor=Vendor.KUNLUNXIN.value,
                model=map_model(name, Vendor.KUNLUNXIN, catalog, out.warnings),
                name=name,
                index=int(row["DevID"]),
                memory_mib=int(memory.group(2)) if memory else None,
                memory_used_mib=int(memory.group(1)) if memory else None,
                bus_id=row.get("PCI Addr", ""),
                utilisation_pct=_pct(row.get("UseRate", "")),
                extra=extra,
            )
        )
    if not out.devices:
        raise SpecError("xpu-smi: found the '| DevID | ...' header but no device rows")
    return out


# -- lspci -nn --------------------------------------------------------------------------

_LSPCI = re.compile(
    r"^(?P<slot>(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+(?P<cls>.+?)\s+\[(?P<cc>[0-9a-f]{4})\]:\s+"
    r"(?P<desc>.+?)\s+\[(?P<vid>[0-9a-f]{4}):(?P<did>[0-9a-f]{4})\](?:\s+\(rev\s+(?P<rev>[0-9a-f]+)\))?",
    re.IGNORECASE,
)
# Accelerator vendors whose unknown devices are still worth reporting (as unknown models)
# when they are processing accelerators (class 12xx) or display controllers (03xx).
_ACCEL_VENDORS = {"19e5": Vendor.HUAWEI, "cabc": Vendor.CAMBRICON, "1d22": Vendor.KUNLUNXIN, "1d94": Vendor.HYGON}


@parser("lspci")
def parse_lspci(text: str, catalog: DeviceCatalog) -> Discovery:
    """`lspci -nn`: the devices whose `[vendor:device]` the catalog knows (Ascend, Hygon,
    Kunlunxin, BlueField DPUs, ...). Other PCI devices are ignored."""
    matches = [m for line in text.splitlines() if (m := _LSPCI.match(line.strip()))]
    if not matches:
        raise SpecError("lspci: expected `lspci -nn` output (lines like '3b:00.0 Processing accelerators [1200]: ... [19e5:d802]')")
    out = Discovery(tool="lspci")
    counters: dict[str, int] = {}
    for m in matches:
        pci_id = f"{m['vid']}:{m['did']}".lower()
        models = catalog.match_pci_id(pci_id)
        if not models and not (m["vid"].lower() in _ACCEL_VENDORS and m["cc"][:2] in ("12", "03")):
            continue
        name = m["desc"]
        extra: dict = {"pci_id": pci_id, "class": m["cls"], "class_code": m["cc"].lower()}
        if m["rev"]:
            extra["revision"] = m["rev"]
        if len(models) == 1:
            vendor, model = models[0].vendor, models[0].name
        elif models:
            vendor = models[0].vendor
            model = f"unknown-{vendor.value}-{slug(pci_id)}"
            extra["candidate_models"] = [x.name for x in models]
            out.warnings.append(
                f"PCI id {pci_id} ({name}) fits several catalog models ({', '.join(extra['candidate_models'])}); "
                f"registered as {model}; the vendor tool names the exact one"
            )
        else:
            vendor = _ACCEL_VENDORS[m["vid"].lower()]
            model = map_model(name, vendor, catalog, out.warnings)
        slot = m["slot"].lower()
        index = counters.get(vendor.value, 0)
        counters[vendor.value] = index + 1
        out.devices.append(
            DiscoveredDevice(
                vendor=vendor.value,
                model=model,
                name=name,
                index=index,
                health="unknown",
                bus_id=slot if slot.count(":") == 2 else f"0000:{slot}",
                extra=extra,
            )
        )
    return out
