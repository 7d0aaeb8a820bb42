"""What this host has: CPUs, memory, NUMA, devices, and the installed software stack.

`describe_host` asks NVML for NVIDIA GPUs (nvidia-smi when NVML is unusable), runs the
other vendor tools it finds on PATH (or reads saved outputs given for testing), scans the
PCI bus for what no tool reports (DPUs, accelerators without their tool), and reads the
frameworks installed in the Python environments it is pointed at. It builds the Node spec
document the agent registers, a DeviceModel document for every model the catalog does
not know (registered, never dropped), and the per-device report of each heartbeat.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetpool.agent.discovery import DiscoveredDevice, Discovery, merge_same_devices, parse_tool_output
from hetpool.agent.frameworks import FrameworkScan, inspect_envs, torch_build
from hetpool.agent.nvml import try_nvml
from hetpool.agent.sysfs import cpu_facts, scan_pci
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.base import is_valid_name
from hetpool.core.inventory import DeviceClass, Vendor

# (executable, parser, arguments) tried in this order
TOOLS = [
    ("nvidia-smi", "nvidia-smi-xml", ["-q", "-x"]),
    ("npu-smi", "npu-smi", ["info"]),
    ("rocm-smi", "rocm-smi-json", ["--showallinfo", "--json"]),
    ("hy-smi", "hy-smi", []),
    ("cnmon", "cnmon", []),
    ("xpu_smi", "xpu-smi", []),
]
RUNTIME_NAMES = {"cuda", "cann", "rocm", "dtk", "neuware", "xre", "doca"}
HEALTH_VALUES = ("ok", "warning", "abnormal", "unknown")


@dataclass
class HostReport:
    node: dict  # a Node spec document (without kind)
    devices: list[dict] = field(default_factory=list)  # heartbeat device reports
    warnings: list[str] = field(default_factory=list)
    # One DeviceModel document per model the catalog does not know (unverified, memory
    # only): registered together with the node so its devices are counted, not dropped.
    models: list[dict] = field(default_factory=list)
    # Facts with no place in the Node spec: CPU model, sockets, NUMA layout, how NVIDIA
    # GPUs were discovered, the inspected Python environments.
    facts: dict = field(default_factory=dict)


def memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 1.0


def run_tools(saved: dict[str, str] | None = None, timeout_s: float = 20.0, skip_nvidia_smi: bool = False) -> tuple[list[Discovery], list[str]]:
    """Discoveries from saved outputs (tool → text) if given, else from tools on PATH.
    `skip_nvidia_smi`: NVML already reported the NVIDIA GPUs."""
    catalog = DeviceCatalog.builtin()
    found, warnings = [], []
    if saved is not None:
        for tool, text in saved.items():
            if not (skip_nvidia_smi and tool.startswith("nvidia-smi")):
                found.append(parse_tool_output(tool, text, catalog))
        return found, warnings
    for executable, tool, args in TOOLS:
        if skip_nvidia_smi and executable == "nvidia-smi":
            continue
        path = shutil.which(executable)
        if path is None:
            continue
        try:
            out = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout_s, check=True).stdout
            found.append(parse_tool_output(tool, out, catalog))
        except Exception as exc:  # a broken tool must not stop the agent; say why
            warnings.append(f"{executable}: {exc}")
    return found, warnings


def _valid_model_name(model: str) -> str:
    """Object names are at most 63 characters; a long printed product name must not make
    the whole registration fail."""
    if is_valid_name(model):
        return model
    return model[:63].rstrip("-._")


def _class_guess(device: DiscoveredDevice, catalog: DeviceCatalog) -> tuple[str, str]:
    """(device class, runtime) for an unknown model: the PCI candidates' if the PCI id
    narrowed it down, else what most catalog models of the vendor are (an unknown NVIDIA
    device is most likely a CUDA GPU, an unknown Huawei one a CANN NPU)."""
    candidates = [catalog.get(n) for n in device.extra.get("candidate_models", []) if n in catalog]
    if candidates:
        return candidates[0].device_class.value, candidates[0].runtime.value
    kinds = Counter((m.device_class.value, m.runtime.value) for m in catalog if m.vendor.value == device.vendor and m.device_class != DeviceClass.CPU)
    if kinds:
        return kinds.most_common(1)[0][0]
    return DeviceClass.GPU.value, "none"


def model_document(device: DiscoveredDevice, catalog: DeviceCatalog) -> dict:
    """A DeviceModel document for a model the catalog does not know. Only what discovery
    saw is filled in; `verified: false` says the figures are defaults."""
    device_class, runtime = _class_guess(device, catalog)
    doc: dict[str, Any] = {
        "kind": "DeviceModel",
        "name": device.model,
        "vendor": Vendor(device.vendor).value,
        "class": device_class,
        "display_name": device.name,
        "memory_gb": round((device.memory_mib or 0) / 1024, 1),
        # The runtime decides which frameworks the compatibility KB lets run on it.
        "runtime": runtime,
        "verified": False,
        "aliases": [device.name],
    }
    pci_id = device.extra.get("pci_id")
    if pci_id and not device.extra.get("candidate_models"):
        doc["pci_ids"] = [pci_id]  # lets the next PCI scan or lspci match it by id
    return doc


def _discover(
    saved: dict[str, str] | None, root: Path, scan_bus: bool, nvml: bool, nvml_module: Any, facts: dict
) -> tuple[list[Discovery], list[str]]:
    catalog = DeviceCatalog.builtin()
    discoveries: list[Discovery] = []
    nvml_worked = False
    if nvml:
        found, why = try_nvml(nvml_module, catalog)
        facts["nvml"] = "ok" if found is not None else why
        if found is not None:
            discoveries.append(found)
            nvml_worked = True
    tools, warnings = run_tools(saved, skip_nvidia_smi=nvml_worked)
    discoveries.extend(tools)
    if scan_bus:
        discoveries.append(scan_pci(root, catalog, discoveries))
    return discoveries, warnings


def describe_host(
    cluster: str,
    name: str | None = None,
    saved: dict[str, str] | None = None,
    *,
    python_envs: list[str | Path] | None = None,
    sysfs_root: str | Path | None = None,
    nvml_module: Any = None,
) -> HostReport:
    """Describe this host. With `saved` tool outputs, live discovery (NVML, vendor tools,
    the PCI scan) is off, except NVML when `nvml_module` is given and the PCI scan when
    `sysfs_root` is given. `sysfs_root` is the filesystem root under which /proc, /sys
    and /etc/os-release are read (default /)."""
    live = saved is None
    root = Path(sysfs_root) if sysfs_root is not None else Path("/")
    facts: dict = {}
    discoveries, warnings = _discover(saved, root, live or sysfs_root is not None, live or nvml_module is not None, nvml_module, facts)
    discoveries = merge_same_devices(discoveries)  # a chip two tools report is one device
    facts.update(cpu_facts(root))
    software = inspect_envs(python_envs, root)
    warnings.extend(software.warnings)
    catalog = DeviceCatalog.builtin()
    arch = "aarch64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    groups: dict[str, int] = {}
    reports: list[dict] = []
    models: dict[str, dict] = {}
    stack: dict = {}
    for found in discoveries:
        warnings.extend(found.warnings)
        for device in found.devices:
            device.model = _valid_model_name(device.model)
            if device.model not in catalog and device.model not in models:
                models[device.model] = model_document(device, catalog)
            index = groups.get(device.model, 0)  # index within the node's group of this model
            groups[device.model] = index + 1
            reports.append(
                {
                    "index": index,
                    "model": device.model,
                    "health": device.health if device.health in HEALTH_VALUES else "unknown",
                    "utilisation_pct": device.utilisation_pct,
                    "memory_used_mib": device.memory_used_mib,
                }
            )
        if found.driver_version and "driver" not in stack:
            stack["driver"] = found.driver_version
        runtime = found.runtime or {}
        if runtime.get("name") in RUNTIME_NAMES and runtime.get("version") and "runtime" not in stack:
            stack["runtime"] = {"name": runtime["name"], "version": runtime["version"]}
    _apply_software(stack, software, bool(groups), facts, warnings)
    cpu_model = "cpu-arm64" if arch == "aarch64" else "cpu-x86-64"
    devices = [{"model": model, "count": count} for model, count in groups.items()]
    if not devices:
        devices = [{"model": cpu_model, "count": 1}]  # a CPU node: joinable to a CPU pool
    warnings.extend(
        f"{m}: not in the catalog; registered with an unverified DeviceModel (memory only); apply a full one to set its figures" for m in models
    )
    node = {
        "name": (name or socket.gethostname().split(".")[0]).lower(),
        "cluster": cluster,
        "arch": arch,
        "cpu_cores": os.cpu_count() or 1,
        "memory_gb": memory_gb(),
        "devices": devices,
    }
    if stack:
        node["stack"] = stack
    return HostReport(node=node, devices=reports, warnings=warnings, models=list(models.values()), facts=facts)


def _apply_software(stack: dict, software: FrameworkScan, has_devices: bool, facts: dict, warnings: list[str]) -> None:
    """Frameworks, python and os into the stack; torch's build label as a runtime hint."""
    if software.frameworks:
        stack["frameworks"] = dict(software.frameworks)
    if software.python:
        stack["python"] = software.python
    if software.os:
        stack["os"] = software.os
    if software.envs:
        facts["python_envs"] = [{"path": e.path, "python": e.python, "frameworks": e.frameworks} for e in software.envs]
    torch = software.frameworks.get("pytorch")
    build = torch_build(torch) if torch else None
    if build is None:
        return
    facts["torch_build"] = {"name": build[0], "version": build[1]}
    runtime = stack.get("runtime")
    if runtime is None and software.runtime_hint and has_devices:
        # No device tool said which runtime the node has; torch was built for one, which is
        # the best hint there is (a CPU node has no use for it).
        stack["runtime"] = dict(software.runtime_hint)
        warnings.append(f"runtime: no device tool reported one; using {build[0]} {build[1]} from torch {torch}'s build label")
    elif runtime is not None and build[0] not in ("none", runtime["name"]) and {build[0], runtime["name"]} != {"rocm", "dtk"}:
        warnings.append(f"torch {torch} is built for {build[0]} but the node's runtime is {runtime['name']} {runtime['version']}")
