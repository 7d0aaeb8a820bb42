"""What this host has: CPUs, memory, and the devices its vendor tools report.

`describe_host` runs the tools it finds on PATH (or reads saved outputs given for
testing) through the discovery parsers and builds the Node spec document the agent
registers, plus the per-device report it sends with each heartbeat.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from hetpool.agent.discovery import Discovery, parse_tool_output
from hetpool.catalog.devices import DeviceCatalog

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


@dataclass
class HostReport:
    node: dict  # a Node spec document (without kind)
    devices: list[dict] = field(default_factory=list)  # heartbeat device reports
    warnings: list[str] = field(default_factory=list)


def memory_gb() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return 1.0


def run_tools(saved: dict[str, str] | None = None, timeout_s: float = 20.0) -> tuple[list[Discovery], list[str]]:
    """Discoveries from saved outputs (tool → text) if given, else from tools on PATH."""
    catalog = DeviceCatalog.builtin()
    found, warnings = [], []
    if saved is not None:
        for tool, text in saved.items():
            found.append(parse_tool_output(tool, text, catalog))
        return found, warnings
    for executable, tool, args in TOOLS:
        path = shutil.which(executable)
        if path is None:
            continue
        try:
            out = subprocess.run([path, *args], capture_output=True, text=True, timeout=timeout_s, check=True).stdout
            found.append(parse_tool_output(tool, out, catalog))
        except Exception as exc:  # a broken tool must not stop the agent; say why
            warnings.append(f"{executable}: {exc}")
    return found, warnings


def describe_host(cluster: str, name: str | None = None, saved: dict[str, str] | None = None) -> HostReport:
    discoveries, warnings = run_tools(saved)
    arch = "aarch64" if platform.machine() in ("aarch64", "arm64") else "x86_64"
    groups: dict[str, int] = {}
    reports: list[dict] = []
    stack: dict = {}
    for found in discoveries:
        warnings.extend(found.warnings)
        for device in found.devices:
            index = groups.get(device.model, 0)  # index within the node's group of this model
            groups[device.model] = index + 1
            reports.append(
                {
                    "index": index,
                    "model": device.model,
                    "health": device.health if device.health in ("ok", "warning", "abnormal") else "ok",
                    "utilisation_pct": device.utilisation_pct,
                    "memory_used_mib": device.memory_used_mib,
                }
            )
        if found.driver_version and "driver" not in stack:
            stack["driver"] = found.driver_version
        runtime = found.runtime or {}
        if runtime.get("name") in RUNTIME_NAMES and runtime.get("version") and "runtime" not in stack:
            stack["runtime"] = {"name": runtime["name"], "version": runtime["version"]}
    cpu_model = "cpu-arm64" if arch == "aarch64" else "cpu-x86-64"
    devices = [{"model": model, "count": count} for model, count in groups.items() if not model.startswith("unknown-")]
    if not devices:
        devices = [{"model": cpu_model, "count": 1}]  # a CPU node: joinable to a CPU pool
    warnings.extend(f"{m}: not in the catalog; apply a DeviceModel to schedule it" for m in groups if m.startswith("unknown-"))
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
    return HostReport(node=node, devices=[r for r in reports if not r["model"].startswith("unknown-")], warnings=warnings)
