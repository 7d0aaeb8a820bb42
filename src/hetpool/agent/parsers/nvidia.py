"""NVIDIA parsers: `nvidia-smi -q -x`, `nvidia-smi --query-gpu=… --format=csv`, and the
capture bundles of utkuozdemir/nvidia_gpu_exporter (several nvidia-smi outputs in one text).
"""

from __future__ import annotations

import csv
import re
import xml.etree.ElementTree as ET

from hetpool.agent.discovery import DiscoveredDevice, Discovery, map_model, parser
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import Vendor

_NUMBER_RE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)")
_HEADER_FIELD_RE = re.compile(r"^[a-z][a-z0-9_.]*(\s*\[[^\]]*\])?$", re.IGNORECASE)
_UNIT_RE = re.compile(r"\s*\[[^\]]*\]\s*$")
_DRIVER_RE = re.compile(r"Driver Version:\s*(\S+)\s+CUDA Version:\s*(\S+)")
_GPU_LINE_RE = re.compile(r"^GPU (\d+): .*\(UUID: ([^)]+)\)\s*$")
_MIG_LINE_RE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)\s*$")
# A row of the "MIG devices" table of plain `nvidia-smi`:
# |  0    2   0   0  |   26MiB / 40448MiB    | 60      0 |  3   0    3    0    3 |
_MIG_TABLE_RE = re.compile(r"^\|\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\|\s*(\d+)MiB\s*/\s*(\d+)MiB\s*\|\s*(\d+)\s")

XML_EXPECTED = "expected the XML of `nvidia-smi -q -x` (root <nvidia_smi_log>)"
CSV_EXPECTED = (
    "expected the output of `nvidia-smi --query-gpu=name,... --format=csv` (a header line naming the fields, including 'name', then one line per GPU)"
)
CAPTURE_EXPECTED = "expected an nvidia_gpu_exporter capture bundle with a `nvidia-smi --query-gpu=... --format=csv` section"


def _number(value: str | None) -> float | None:
    """`"81920 MiB"` → 81920.0; `"N/A"`, `"[N/A]"`, `"[Not Supported]"`, "" → None."""
    if value is None:
        return None
    match = _NUMBER_RE.match(value)
    return float(match.group(1)) if match else None


def _int(value: str | None) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _text(elem: ET.Element | None, path: str) -> str | None:
    if elem is None:
        return None
    found = elem.find(path)
    if found is None or found.text is None:
        return None
    text = found.text.strip()
    return text or None


# -- nvidia-smi -q -x -------------------------------------------------------------------


def _xml_health(gpu: ET.Element) -> list[str]:
    """Reasons to call a GPU abnormal; only unambiguous signals, absent fields are fine."""
    reasons: list[str] = []
    volatile = gpu.find("ecc_errors/volatile")
    if volatile is not None:
        for counter in volatile:
            count = _int(counter.text)
            if "uncorrectable" in counter.tag and count:
                reasons.append(f"ecc_errors/volatile/{counter.tag} = {count}")
    for path in (
        "ecc_errors/unrepairable_memory",
        "ecc_errors/channel_repair_pending",
        "ecc_errors/tpc_repair_pending",
        "retired_pages/pending_blacklist",
        "retired_pages/pending_retirement",
        "remapped_rows/remapped_row_pending",
        "remapped_rows/remapped_row_failure",
    ):
        if (_text(gpu, path) or "").lower() == "yes":
            reasons.append(f"{path} = Yes")
    return reasons


def _xml_mig(gpu: ET.Element) -> list[dict]:
    return [
        {
            "gpu_instance_id": _int(_text(mig, "gpu_instance_id")),
            "compute_instance_id": _int(_text(mig, "compute_instance_id")),
            "memory_mib": _int(_text(mig, "fb_memory_usage/total")),
            "multiprocessor_count": _int(_text(mig, "device_attributes/shared/multiprocessor_count")),
        }
        for mig in gpu.findall("mig_devices/mig_device")
    ]


@parser("nvidia-smi-xml")
def parse_nvidia_smi_xml(text: str, catalog: DeviceCatalog) -> Discovery:
    if "<nvidia_smi_log" not in text:
        raise SpecError(f"nvidia-smi-xml: {XML_EXPECTED}")
    try:
        root = ET.fromstring(text.strip())
    except ET.ParseError as exc:
        raise SpecError(f"nvidia-smi-xml: not well-formed XML ({exc}); {XML_EXPECTED}") from None
    if root.tag != "nvidia_smi_log":
        raise SpecError(f"nvidia-smi-xml: root element is <{root.tag}>; {XML_EXPECTED}")
    result = Discovery(tool="nvidia-smi-xml", driver_version=_text(root, "driver_version"))
    cuda = _text(root, "cuda_version")
    if cuda and cuda != "N/A":
        result.runtime = {"name": "cuda", "version": cuda}
    for index, gpu in enumerate(root.findall("gpu")):
        name = _text(gpu, "product_name") or "unknown"
        reasons = _xml_health(gpu)
        device = DiscoveredDevice(
            vendor=Vendor.NVIDIA.value,
            model=map_model(name, Vendor.NVIDIA, catalog, result.warnings),
            name=name,
            index=index,
            memory_mib=_int(_text(gpu, "fb_memory_usage/total")),
            memory_used_mib=_int(_text(gpu, "fb_memory_usage/used")),
            utilisation_pct=_number(_text(gpu, "utilization/gpu_util")),
            bus_id=_text(gpu, "pci/pci_bus_id") or gpu.get("id", ""),
            uuid=_text(gpu, "uuid") or "",
            health="abnormal" if reasons else "ok",
        )
        mig = _xml_mig(gpu)
        if mig:
            device.extra["mig"] = mig
        if reasons:
            device.extra["health_reasons"] = reasons
            result.warnings.append(f"GPU {index} ({name}) is abnormal: {'; '.join(reasons)}")
        result.devices.append(device)
    if not result.devices:
        result.warnings.append("nvidia-smi-xml: the log lists no <gpu> elements")
    return result


# -- nvidia-smi --query-gpu=… --format=csv ----------------------------------------------


def _header_fields(line: str) -> list[str] | None:
    """Field names (units stripped) if `line` is a --query-gpu CSV header naming `name`."""
    fields = [f.strip() for f in line.rstrip().rstrip(",").split(",")]
    if len(fields) < 1 or not all(_HEADER_FIELD_RE.match(f) for f in fields):
        return None
    names = [_UNIT_RE.sub("", f).lower() for f in fields]
    return names if "name" in names else None


def _csv_rows(text: str) -> list[dict[str, str]] | None:
    """The rows of the first --query-gpu CSV block in `text`, or None if there is none."""
    lines = text.splitlines()
    for start, line in enumerate(lines):
        header = _header_fields(line)
        if header is None:
            continue
        block: list[str] = []
        for row in lines[start + 1 :]:
            if not row.strip() or row.startswith("#"):
                break
            block.append(row)
        return [{key: value.strip() for key, value in zip(header, values, strict=False)} for values in csv.reader(block, skipinitialspace=True)]
    return None


def _missing(value: str | None) -> bool:
    return value is None or value == "" or value.startswith("[") or value.upper() == "N/A"


def _parse_csv(text: str, catalog: DeviceCatalog, tool: str) -> Discovery | None:
    rows = _csv_rows(text)
    if rows is None:
        return None
    result = Discovery(tool=tool)
    for position, row in enumerate(rows):
        name = row.get("name") or "unknown"
        index = _int(row.get("index"))
        device = DiscoveredDevice(
            vendor=Vendor.NVIDIA.value,
            model=map_model(name, Vendor.NVIDIA, catalog, result.warnings),
            name=name,
            index=position if index is None else index,
            memory_mib=_int(row.get("memory.total")),
            memory_used_mib=_int(row.get("memory.used")),
            utilisation_pct=_number(row.get("utilization.gpu")),
            bus_id="" if _missing(row.get("pci.bus_id")) else row["pci.bus_id"],
            uuid="" if _missing(row.get("uuid")) else row["uuid"],
        )
        if not _missing(row.get("compute_cap")):
            device.extra["compute_cap"] = row["compute_cap"]
        driver = row.get("driver_version")
        if result.driver_version is None and not _missing(driver):
            result.driver_version = driver
        result.devices.append(device)
    if not result.devices:
        result.warnings.append(f"{tool}: the CSV has a header but no GPU rows")
    return result


@parser("nvidia-smi-csv")
def parse_nvidia_smi_csv(text: str, catalog: DeviceCatalog) -> Discovery:
    result = _parse_csv(text, catalog, "nvidia-smi-csv")
    if result is None:
        raise SpecError(f"nvidia-smi-csv: no CSV header found; {CSV_EXPECTED} (not `noheader`)")
    return result


# -- nvidia_gpu_exporter capture bundles --------------------------------------------------


def _capture_section(text: str, title: str) -> str | None:
    """The body of the first `# <phase> :: <title>` section (between the #### rules)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("# ") and " :: " in line and title in line:
            body_start = next((j + 1 for j in range(i + 1, len(lines)) if lines[j].startswith("####")), None)
            if body_start is None:
                return None
            body_end = next((j for j in range(body_start, len(lines)) if lines[j].startswith("####")), len(lines))
            return "\n".join(lines[body_start:body_end])
    return None


def _capture_mig(text: str) -> dict[int, list[dict]]:
    """MIG slices per GPU index from `nvidia-smi -L`, enriched with the `MIG devices`
    table of plain `nvidia-smi` (instance ids, memory, SM count) where it is present."""
    listing = _capture_section(text, "list (-L)") or ""
    table = _capture_section(text, "nvidia-smi (default table)") or ""
    details: dict[tuple[int, int], dict] = {}
    for line in table.splitlines():
        match = _MIG_TABLE_RE.match(line)
        if match:
            gpu, gi, ci, dev, _used, total, sm = (int(g) for g in match.groups())
            details[(gpu, dev)] = {
                "gpu_instance_id": gi,
                "compute_instance_id": ci,
                "memory_mib": total,
                "multiprocessor_count": sm,
            }
    slices: dict[int, list[dict]] = {}
    gpu_index: int | None = None
    for line in listing.splitlines():
        if match := _GPU_LINE_RE.match(line):
            gpu_index = int(match.group(1))
        elif (match := _MIG_LINE_RE.match(line)) and gpu_index is not None:
            profile, dev, uuid = match.group(1), int(match.group(2)), match.group(3)
            entry = {"profile": profile, "device": dev, "uuid": uuid}
            entry.update(details.get((gpu_index, dev), {}))
            slices.setdefault(gpu_index, []).append(entry)
    return slices


@parser("nvidia-smi-capture")
def parse_nvidia_smi_capture(text: str, catalog: DeviceCatalog) -> Discovery:
    section = _capture_section(text, "query-gpu (csv")
    result = _parse_csv(section if section is not None else text, catalog, "nvidia-smi-capture")
    if result is None:
        raise SpecError(f"nvidia-smi-capture: no --query-gpu CSV found; {CAPTURE_EXPECTED}")
    versions = _DRIVER_RE.search(text)
    if versions:
        result.driver_version = versions.group(1)
        result.runtime = {"name": "cuda", "version": versions.group(2)}
    mig = _capture_mig(text)
    for device in result.devices:
        if device.index in mig:
            device.extra["mig"] = mig[device.index]
    return result
