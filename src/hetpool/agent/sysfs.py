"""What the kernel says about this host: CPU model and cores, NUMA nodes, PCI devices.

Everything is read from files under a root directory (default `/`) so tests can point it
at a tree laid out like /proc and /sys. The PCI scan finds devices no vendor tool
reports: BlueField DPUs (no tool in the agent's list), accelerators whose tool is not
installed, and accelerators the tool no longer sees (fallen off the driver).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from hetpool.agent.discovery import DiscoveredDevice, Discovery, slug
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import Vendor

# PCI vendor ids of accelerator vendors: their unknown processing-accelerator (12xx) or
# display (03xx) functions are reported as unknown models, never dropped. Other vendors'
# devices are reported only when the catalog knows their id (BlueField is 15b3 Mellanox,
# whose other devices are ordinary NICs).
ACCELERATOR_VENDORS = {
    "10de": Vendor.NVIDIA,
    "1002": Vendor.AMD,
    "19e5": Vendor.HUAWEI,
    "1d94": Vendor.HYGON,
    "cabc": Vendor.CAMBRICON,
    "1d22": Vendor.KUNLUNXIN,
}
ACCELERATOR_CLASSES = ("12", "03")
# Display functions of accelerator vendors that are not accelerators: the Hi171x BMC's
# VGA on Huawei servers would otherwise show up as an unknown Huawei device.
NOT_ACCELERATORS = {"19e5:1711"}
# Which PCI vendor ids a vendor tool's devices cover (DiscoveredDevice.vendor → ids).
TOOL_PCI_VENDORS = {
    Vendor.NVIDIA.value: {"10de"},
    Vendor.AMD.value: {"1002"},
    Vendor.HUAWEI.value: {"19e5"},
    Vendor.HYGON.value: {"1d94"},
    Vendor.CAMBRICON.value: {"cabc"},
    Vendor.KUNLUNXIN.value: {"1d22"},
}
# PCI-based discoveries (lspci output) list devices, they do not vouch for a driver.
PCI_TOOLS = {"lspci", "sysfs-pci"}
# aarch64 /proc/cpuinfo has no "model name": (implementer, part) → a name.
ARM_IMPLEMENTERS = {"0x41": "ARM", "0x48": "HiSilicon", "0x4e": "NVIDIA", "0x51": "Qualcomm", "0x70": "Phytium", "0xc0": "Ampere"}
ARM_PARTS = {
    ("0x48", "0xd01"): "Kunpeng-920",
    ("0x41", "0xd0c"): "Neoverse-N1",
    ("0x41", "0xd40"): "Neoverse-V1",
    ("0x41", "0xd49"): "Neoverse-N2",
    ("0x41", "0xd4f"): "Neoverse-V2",
    ("0x70", "0x662"): "FTC662",
    ("0x70", "0x663"): "FTC663",
}
_BUS_ID_RE = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


# -- CPU and NUMA -----------------------------------------------------------------------


def _cpuinfo_blocks(text: str) -> list[dict[str, str]]:
    blocks: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, sep, value = line.partition(":")
        if sep:
            current[key.strip().lower()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def _cpu_model(blocks: list[dict[str, str]]) -> str:
    for block in blocks:
        if block.get("model name"):
            return block["model name"]
    for block in blocks:
        implementer, part = block.get("cpu implementer", "").lower(), block.get("cpu part", "").lower()
        if implementer:
            vendor = ARM_IMPLEMENTERS.get(implementer, f"implementer {implementer}")
            return f"{vendor} {ARM_PARTS.get((implementer, part), f'part {part}')}".strip()
    return ""


def cpu_facts(root: str | Path = "/") -> dict:
    """CPU model, logical CPUs, physical cores, sockets and NUMA nodes (with their CPUs)."""
    base = Path(root)
    blocks = [b for b in _cpuinfo_blocks(_read(base / "proc/cpuinfo")) if "processor" in b]
    facts: dict = {"cpu_model": _cpu_model(blocks), "cpu_logical": len(blocks)}
    cores = {(b["physical id"], b["core id"]) for b in blocks if "physical id" in b and "core id" in b}
    if cores:  # x86 lists socket and core per logical CPU; arm64 does not
        facts["cpu_physical_cores"] = len(cores)
        facts["cpu_sockets"] = len({socket for socket, _ in cores})
    numa: dict[str, str] = {}
    node_dir = base / "sys/devices/system/node"
    for node in sorted(node_dir.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        numa[node.name[4:]] = _read(node / "cpulist")
    # A kernel built without NUMA has no node directories: the host is one node.
    facts["numa_nodes"] = max(len(numa), 1)
    if numa:
        facts["numa_cpus"] = numa
    return facts


# -- PCI --------------------------------------------------------------------------------


def normalise_bus_id(bus_id: str) -> str:
    """ "00000000:3B:00.0" (NVML), "3b:00.0" (lspci) → "0000:3b:00.0" (sysfs); "" if not one."""
    match = _BUS_ID_RE.match(bus_id.strip())
    if not match:
        return ""
    domain, bus, device, function = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(device, 16):02x}.{function}"


@dataclass
class PciFunction:
    bus_id: str  # 0000:3b:00.0
    vendor_id: str  # 19e5
    device_id: str  # d802
    class_code: str  # 1200 (class and subclass)
    virtual: bool = False  # an SR-IOV virtual function (has a physfn link)

    @property
    def pci_id(self) -> str:
        return f"{self.vendor_id}:{self.device_id}"

    @property
    def slot(self) -> str:
        return self.bus_id.rsplit(".", 1)[0]


def read_pci(root: str | Path = "/") -> list[PciFunction]:
    """Every function under <root>/sys/bus/pci/devices (files `vendor`, `device`, `class`
    hold "0x15b3", "0xa2d6", "0x020000")."""
    functions: list[PciFunction] = []
    for entry in sorted((Path(root) / "sys/bus/pci/devices").glob("*")):
        vendor, device, cls = (_read(entry / name).lower().removeprefix("0x") for name in ("vendor", "device", "class"))
        if not vendor or not device:
            continue
        functions.append(
            PciFunction(
                bus_id=normalise_bus_id(entry.name) or entry.name.lower(),
                vendor_id=vendor.zfill(4),
                device_id=device.zfill(4),
                class_code=cls.zfill(6)[:4],
                virtual=(entry / "physfn").exists(),
            )
        )
    return functions


def pci_names(root: str | Path = "/") -> dict[str, str]:
    """ "vendor:device" → name from the pci.ids database, where the host has one."""
    for relative in ("usr/share/misc/pci.ids", "usr/share/hwdata/pci.ids", "usr/share/pci.ids"):
        text = _read(Path(root) / relative)
        if not text:
            continue
        names: dict[str, str] = {}
        vendor = ""
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            if not line.startswith("\t"):
                vendor = line[:4].lower() if line[:4].isalnum() else ""
            elif not line.startswith("\t\t") and vendor:
                names[f"{vendor}:{line[1:5].lower()}"] = line[5:].strip()
        return names
    return {}


def _interesting(function: PciFunction, catalog: DeviceCatalog) -> bool:
    if function.virtual or function.pci_id in NOT_ACCELERATORS:
        return False  # a VF is a slice of a device already counted by its physical function
    if catalog.match_pci_id(function.pci_id):
        return True
    return function.vendor_id in ACCELERATOR_VENDORS and function.class_code[:2] in ACCELERATOR_CLASSES


def _coverage(reported: list[Discovery]) -> tuple[set[str], dict[str, int], dict[str, str]]:
    """(bus ids the tools reported, per PCI vendor id: devices reported without a bus id,
    per PCI vendor id: the tool that covers it)."""
    bus_ids: set[str] = set()
    without_bus: dict[str, int] = {}
    covered: dict[str, str] = {}
    for found in reported:
        for device in found.devices:
            bus = normalise_bus_id(device.bus_id)
            if bus:
                bus_ids.add(bus)
            if found.tool in PCI_TOOLS:
                continue
            for vendor_id in TOOL_PCI_VENDORS.get(device.vendor, ()):
                covered.setdefault(vendor_id, found.tool)
                if not bus:
                    without_bus[vendor_id] = without_bus.get(vendor_id, 0) + 1
    return bus_ids, without_bus, covered


def scan_pci(root: str | Path = "/", catalog: DeviceCatalog | None = None, reported: list[Discovery] = ()) -> Discovery:
    """Devices on the PCI bus that `reported` (the vendor tools' discoveries) does not
    already count, as a Discovery of tool "sysfs-pci".

    A device is one PCI slot: the functions of a multi-port card (BlueField's two ports,
    00.0 and 00.1) count once, and SR-IOV virtual functions not at all. A device a tool
    reported is skipped by bus id, or, for tools that print no bus id, up to the number of
    such devices of that vendor. A device of a vendor whose tool ran but does not list it
    is reported as abnormal: the driver has lost it, so it must not be scheduled."""
    catalog = catalog or DeviceCatalog.builtin()
    out = Discovery(tool="sysfs-pci")
    bus_ids, without_bus, covered = _coverage(list(reported))
    names = pci_names(root)
    slots: dict[tuple[str, str], list[PciFunction]] = {}
    for function in read_pci(root):
        if _interesting(function, catalog):
            slots.setdefault((function.slot, function.pci_id), []).append(function)
    counters: dict[str, int] = {}
    for (_slot, pci_id), functions in slots.items():
        first = functions[0]
        if any(f.bus_id in bus_ids for f in functions):
            continue
        tool = covered.get(first.vendor_id)
        if tool and without_bus.get(first.vendor_id, 0) > 0:
            without_bus[first.vendor_id] -= 1  # most likely this one, reported without a bus id
            continue
        models = catalog.match_pci_id(pci_id)
        extra: dict = {"pci_id": pci_id, "class_code": first.class_code, "functions": [f.bus_id for f in functions]}
        pci_name = names.get(pci_id, "")
        if len(models) == 1:
            vendor, model, name = models[0].vendor, models[0].name, models[0].display_name
        elif models:
            vendor, model = models[0].vendor, f"unknown-{models[0].vendor.value}-{slug(pci_id)}"
            name = pci_name or f"PCI device {pci_id}"
            extra["candidate_models"] = [m.name for m in models]
            out.warnings.append(
                f"PCI {first.bus_id} ({pci_id}) fits several catalog models ({', '.join(extra['candidate_models'])}); "
                f"registered as {model}; the vendor tool names the exact one"
            )
        else:
            vendor, model = ACCELERATOR_VENDORS[first.vendor_id], f"unknown-{ACCELERATOR_VENDORS[first.vendor_id].value}-{slug(pci_id)}"
            name = pci_name or f"PCI device {pci_id}"
            out.warnings.append(f"PCI {first.bus_id}: {name} ({pci_id}, class {first.class_code}) is not in the catalog; registered as {model}")
        if pci_name:
            extra["pci_name"] = pci_name
        index = counters.get(vendor.value, 0)
        counters[vendor.value] = index + 1
        device = DiscoveredDevice(vendor=vendor.value, model=model, name=name, index=index, health="unknown", bus_id=first.bus_id, extra=extra)
        if tool:
            device.health = "abnormal"
            device.extra["health_reasons"] = [f"on the PCI bus but not listed by {tool}"]
            out.warnings.append(f"PCI {first.bus_id} ({pci_id}) is on the bus but {tool} does not list it: reported as abnormal")
        out.devices.append(device)
    return out
