"""NVIDIA discovery through NVML (the `pynvml` module of the nvidia-ml-py package).

NVML is what nvidia-smi itself reads, without a subprocess or text to parse, and it
answers per device, so one broken GPU costs a warning instead of the whole report. The
agent tries it first and falls back to `nvidia-smi -q -x` when `pynvml` is not installed
or `nvmlInit` fails (no driver, no GPU, a container without the library).

The NVML module is a parameter (default: `import pynvml`) so the logic can be exercised
without a GPU.

Health mapping (the same signals as the nvidia-smi XML parser, plus clock slowdowns):
  abnormal  volatile uncorrected ECC errors > 0, retired pages pending, or remapped rows
            pending / failed: memory the GPU cannot be trusted with until it is reset;
  warning   a hardware slowdown clock event (HW slowdown, HW thermal slowdown, HW power
            brake): the GPU works but runs slower than its peers;
  ok        otherwise. An answer of NOT_SUPPORTED (ECC off, a consumer card, a pre-Ampere
            GPU without row remapping, …) is no signal, not a warning.
"""

from __future__ import annotations

import re
from typing import Any

from hetpool.agent.discovery import DiscoveredDevice, Discovery, map_model
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import Vendor

MIB = 1024 * 1024
# pynvml's values, used when a (stand-in or older) module lacks the constant.
_DEFAULTS = {
    "NVML_ERROR_NOT_SUPPORTED": 3,
    "NVML_ERROR_NOT_FOUND": 6,
    "NVML_ERROR_FUNCTION_NOT_FOUND": 13,
    "NVML_MEMORY_ERROR_TYPE_UNCORRECTED": 1,
    "NVML_VOLATILE_ECC": 0,
    "NVML_DEVICE_MIG_ENABLE": 1,
}
# nvmlClocksEventReasonHwSlowdown | …HwThermalSlowdown | …HwPowerBrakeSlowdown
_HW_SLOWDOWN_MASK = 0x8 | 0x40 | 0x80
_MIG_PROFILE_RE = re.compile(r"\bMIG\s+(\S+)\s*$")


def _const(nvml: Any, name: str) -> int:
    return getattr(nvml, name, _DEFAULTS[name])


def _text(value: Any) -> str:
    # pynvml returns str (its convertStrBytes decorator); older bindings returned bytes.
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").strip()
    return str(value).strip() if value is not None else ""


class _Calls:
    """Calls NVML functions by name; an NVMLError becomes a warning and a default, so
    one failing query (or one failing GPU) does not lose the rest of the report."""

    def __init__(self, nvml: Any, warnings: list[str]) -> None:
        self.nvml = nvml
        self.warnings = warnings
        self.error = getattr(nvml, "NVMLError", Exception)
        # Answers that mean "this GPU or driver has no such thing", not "something broke".
        self.quiet = {_const(nvml, "NVML_ERROR_NOT_SUPPORTED"), _const(nvml, "NVML_ERROR_FUNCTION_NOT_FOUND")}

    def __call__(self, where: str, fn_name: str, *args: Any, quiet: tuple[int, ...] = ()) -> Any:
        fn = getattr(self.nvml, fn_name, None)
        if fn is None:  # a binding older than the function: same as FUNCTION_NOT_FOUND
            return None
        try:
            return fn(*args)
        except self.error as exc:
            if getattr(exc, "value", None) not in self.quiet | set(quiet):
                self.warnings.append(f"{where}: {fn_name} failed: {exc}")
            return None


def _cuda_version(value: int | None) -> str | None:
    """NVML's CUDA version integer: 12020 → "12.2"."""
    if not value:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _pci_id(pci: Any) -> str:
    """ "10de:2335" from nvmlPciInfo_t.pciDeviceId (device id in the high 16 bits)."""
    raw = getattr(pci, "pciDeviceId", None)
    if not isinstance(raw, int) or raw <= 0:
        return ""
    return f"{raw & 0xFFFF:04x}:{raw >> 16 & 0xFFFF:04x}"


def _model(name: str, pci_id: str, catalog: DeviceCatalog, warnings: list[str]) -> tuple[str, str]:
    """(catalog model or unknown-…, how it was matched). The product name decides; a PCI
    id that names exactly one catalog model rescues a name the catalog lacks (an OEM
    variant string, or a name NVML failed to return)."""
    if name:
        match = catalog.match_product(name, Vendor.NVIDIA)
        if match is not None:
            return match.name, "name"
    by_pci = catalog.match_pci_id(pci_id) if pci_id else []
    if len(by_pci) == 1 and by_pci[0].vendor == Vendor.NVIDIA:
        return by_pci[0].name, "pci_id"
    return map_model(name or (f"PCI {pci_id}" if pci_id else "unknown"), Vendor.NVIDIA, catalog, warnings), "unknown"


def _health(call: _Calls, handle: Any, where: str) -> tuple[list[str], list[str]]:
    """(reasons for abnormal, reasons for warning); see the module docstring."""
    nvml = call.nvml
    abnormal: list[str] = []
    warning: list[str] = []
    ecc = call(where, "nvmlDeviceGetTotalEccErrors", handle, _const(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED"), _const(nvml, "NVML_VOLATILE_ECC"))
    if ecc:
        abnormal.append(f"volatile uncorrected ECC errors = {ecc}")
    if call(where, "nvmlDeviceGetRetiredPagesPendingStatus", handle):
        abnormal.append("retired pages pending")
    rows = call(where, "nvmlDeviceGetRemappedRows", handle)  # (corrected, uncorrected, pending, failure)
    if rows and len(rows) >= 4:
        if rows[2]:
            abnormal.append("remapped rows pending")
        if rows[3]:
            abnormal.append("row remapping failed")
    # ClocksThrottleReasons is deprecated in favour of ClocksEventReasons (same bits);
    # ask the new name first and fall back for older drivers and bindings.
    reasons = call(where, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    if reasons is None:
        reasons = call(where, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if isinstance(reasons, int) and reasons & _HW_SLOWDOWN_MASK:
        warning.append(f"hardware clock slowdown (clock event reasons 0x{reasons:x})")
    return abnormal, warning


def _mig_slices(call: _Calls, handle: Any, where: str) -> list[dict]:
    """The MIG devices of a GPU in MIG mode, in the keys the nvidia-smi parsers use."""
    slices: list[dict] = []
    slots = call(where, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0
    not_found = _const(call.nvml, "NVML_ERROR_NOT_FOUND")
    for slot in range(slots):
        # Empty slots answer NOT_FOUND: expected, not a warning.
        mig = call(where, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot, quiet=(not_found,))
        if mig is None:
            continue
        mig_where = f"{where} MIG device {slot}"
        entry: dict = {"device": slot}
        name = _text(call(mig_where, "nvmlDeviceGetName", mig))
        if match := _MIG_PROFILE_RE.search(name):
            entry["profile"] = match.group(1)
        entry["uuid"] = _text(call(mig_where, "nvmlDeviceGetUUID", mig))
        entry["gpu_instance_id"] = call(mig_where, "nvmlDeviceGetGpuInstanceId", mig)
        entry["compute_instance_id"] = call(mig_where, "nvmlDeviceGetComputeInstanceId", mig)
        memory = call(mig_where, "nvmlDeviceGetMemoryInfo", mig)
        entry["memory_mib"] = int(memory.total) // MIB if memory is not None else None
        attributes = call(mig_where, "nvmlDeviceGetAttributes", mig)
        entry["multiprocessor_count"] = getattr(attributes, "multiprocessorCount", None)
        slices.append(entry)
    return slices


def _device(call: _Calls, index: int, catalog: DeviceCatalog, warnings: list[str]) -> DiscoveredDevice | None:
    where = f"GPU {index}"
    handle = call(where, "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        warnings.append(f"{where}: NVML gave no handle; the GPU is not reported (see the error above)")
        return None
    name = _text(call(where, "nvmlDeviceGetName", handle))
    pci = call(where, "nvmlDeviceGetPciInfo_v3", handle)
    if pci is None:
        pci = call(where, "nvmlDeviceGetPciInfo", handle)
    pci_id = _pci_id(pci)
    model, matched_by = _model(name, pci_id, catalog, warnings)
    memory = call(where, "nvmlDeviceGetMemoryInfo", handle)
    utilisation = call(where, "nvmlDeviceGetUtilizationRates", handle)  # NOT_SUPPORTED in MIG mode
    device = DiscoveredDevice(
        vendor=Vendor.NVIDIA.value,
        model=model,
        name=name or f"PCI {pci_id}",
        index=index,
        memory_mib=int(memory.total) // MIB if memory is not None else None,
        memory_used_mib=int(memory.used) // MIB if memory is not None else None,
        utilisation_pct=float(utilisation.gpu) if utilisation is not None else None,
        bus_id=_text(getattr(pci, "busId", "")),
        uuid=_text(call(where, "nvmlDeviceGetUUID", handle)),
    )
    if pci_id:
        device.extra["pci_id"] = pci_id
    if matched_by == "pci_id":
        device.extra["matched_by"] = "pci_id"
    capability = call(where, "nvmlDeviceGetCudaComputeCapability", handle)
    if capability:
        device.extra["compute_cap"] = ".".join(str(part) for part in capability)
    mig_mode = call(where, "nvmlDeviceGetMigMode", handle)  # [current, pending]
    if mig_mode and mig_mode[0] == _const(call.nvml, "NVML_DEVICE_MIG_ENABLE"):
        device.extra["mig"] = _mig_slices(call, handle, where)
    abnormal, warning = _health(call, handle, where)
    if abnormal or warning:
        device.health = "abnormal" if abnormal else "warning"
        device.extra["health_reasons"] = abnormal + warning
        warnings.append(f"{where} ({device.name}) is {device.health}: {'; '.join(abnormal + warning)}")
    return device


def _discover(nvml: Any, catalog: DeviceCatalog) -> Discovery:
    result = Discovery(tool="nvml")
    call = _Calls(nvml, result.warnings)
    driver = _text(call("NVML", "nvmlSystemGetDriverVersion"))
    result.driver_version = driver or None
    cuda = call("NVML", "nvmlSystemGetCudaDriverVersion_v2")
    if cuda is None:
        cuda = call("NVML", "nvmlSystemGetCudaDriverVersion")
    if version := _cuda_version(cuda):
        result.runtime = {"name": "cuda", "version": version}
    # Not wrapped: without a count there is nothing to report, and the caller falls back.
    count = nvml.nvmlDeviceGetCount()
    for index in range(count):
        try:
            device = _device(call, index, catalog, result.warnings)
        except Exception as exc:  # an unexpected answer for one GPU must not lose the others
            result.warnings.append(f"GPU {index}: NVML discovery failed ({type(exc).__name__}: {exc}); the GPU is not reported")
            continue
        if device is not None:
            result.devices.append(device)
    if count == 0:
        result.warnings.append("nvml: the driver is loaded but reports no GPUs")
    return result


def try_nvml(nvml_module: Any = None, catalog: DeviceCatalog | None = None) -> tuple[Discovery | None, str]:
    """(the NVML discovery, "") or (None, why NVML cannot be used here).

    `nvml_module` defaults to importing `pynvml`; tests pass a stand-in."""
    nvml = nvml_module
    if nvml is None:
        try:
            import pynvml as nvml  # optional dependency (nvidia-ml-py): imported only when asked
        except ImportError as exc:
            return None, f"pynvml is not installed ({exc}); pip install nvidia-ml-py"
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded on hosts without a driver
        return None, f"nvmlInit failed: {exc}"
    try:
        return _discover(nvml, catalog or DeviceCatalog.builtin()), ""
    except Exception as exc:  # e.g. nvmlDeviceGetCount failed: nvidia-smi may still work
        return None, f"NVML discovery failed: {type(exc).__name__}: {exc}"
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:  # nothing useful to do if shutdown fails; the report stands
            pass


def discover_nvml(nvml_module: Any = None, catalog: DeviceCatalog | None = None) -> Discovery | None:
    """NVIDIA GPUs through NVML, or None where NVML is not usable (the agent then runs
    nvidia-smi)."""
    return try_nvml(nvml_module, catalog)[0]
