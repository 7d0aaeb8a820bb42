"""NVML discovery (hetpool.agent.nvml).

This machine has no NVIDIA driver, so the real `pynvml` can only show the fallback: it
is exercised for that. The discovery logic runs against `StandInNvml`, a minimal
hand-written stand-in for the handful of pynvml functions nvml.py calls (not a model of
NVML). The real check on a GPU host is:
    python -c "from hetpool.agent.nvml import discover_nvml; print(discover_nvml())"
"""

from __future__ import annotations

import importlib.util
import sys
from types import SimpleNamespace

import pytest

from hetpool.agent.nvml import discover_nvml, try_nvml

MIB = 1024 * 1024
NOT_SUPPORTED, NOT_FOUND, GPU_IS_LOST = 3, 6, 15


class StandInNVMLError(Exception):
    """Like pynvml.NVMLError: the NVML return code in `.value`."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


class StandInNvml:
    """A stand-in for the `pynvml` module: system answers, and per GPU a dict whose keys
    answer the device functions below. A missing key answers NOT_SUPPORTED, an exception
    value is raised. Functions not listed do not exist (as in an older binding)."""

    NVMLError = StandInNVMLError
    NVML_ERROR_NOT_SUPPORTED = NOT_SUPPORTED
    NVML_ERROR_NOT_FOUND = NOT_FOUND
    DEVICE_FUNCTIONS = {
        "nvmlDeviceGetName": "name",
        "nvmlDeviceGetUUID": "uuid",
        "nvmlDeviceGetPciInfo_v3": "pci",
        "nvmlDeviceGetMemoryInfo": "memory",
        "nvmlDeviceGetUtilizationRates": "utilisation",
        "nvmlDeviceGetCudaComputeCapability": "compute_cap",
        "nvmlDeviceGetMigMode": "mig_mode",
        "nvmlDeviceGetMaxMigDeviceCount": "mig_slots",
        "nvmlDeviceGetTotalEccErrors": "ecc_uncorrected_volatile",
        "nvmlDeviceGetRetiredPagesPendingStatus": "retired_pending",
        "nvmlDeviceGetRemappedRows": "remapped_rows",
        "nvmlDeviceGetCurrentClocksThrottleReasons": "throttle",
        "nvmlDeviceGetGpuInstanceId": "gi",
        "nvmlDeviceGetComputeInstanceId": "ci",
        "nvmlDeviceGetAttributes": "attributes",
    }

    def __init__(self, gpus: list, init_error: Exception | None = None, driver: str = "550.54.15", cuda: int | None = 12040) -> None:
        self.gpus, self.init_error, self.driver, self.cuda = gpus, init_error, driver, cuda
        self.shut_down = False

    def nvmlInit(self) -> None:
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shut_down = True

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        if self.cuda is None:
            raise StandInNVMLError(NOT_SUPPORTED)
        return self.cuda

    def nvmlDeviceGetCount(self) -> int:
        if isinstance(self.gpus, Exception):
            raise self.gpus
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> dict:
        if isinstance(self.gpus[index], Exception):
            raise self.gpus[index]
        return self.gpus[index]

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: dict, slot: int) -> dict:
        mig = handle["mig"][slot]
        if mig is None:
            raise StandInNVMLError(NOT_FOUND)
        return mig

    def __getattr__(self, fn_name: str):
        key = self.DEVICE_FUNCTIONS.get(fn_name)
        if key is None:
            raise AttributeError(fn_name)

        def answer(handle: dict, *args):
            value = handle.get(key, StandInNVMLError(NOT_SUPPORTED))
            if isinstance(value, Exception):
                raise value
            return value

        return answer


def memory(total_mib: int, used_mib: int) -> SimpleNamespace:
    return SimpleNamespace(total=total_mib * MIB, used=used_mib * MIB, free=(total_mib - used_mib) * MIB)


def gpu(index: int, name: str = "NVIDIA H200", pci_device: int = 0x2335, **overrides) -> dict:
    answers = {
        "name": name,
        "uuid": f"GPU-0000000{index}-aaaa-bbbb-cccc-ddddeeeeffff",
        "pci": SimpleNamespace(busId=f"00000000:{0x18 + index:02X}:00.0", pciDeviceId=pci_device << 16 | 0x10DE),
        "memory": memory(143771, 512 * index),
        "utilisation": SimpleNamespace(gpu=10 * index, memory=0),
        "compute_cap": (9, 0),
        "mig_mode": [0, 0],
        "ecc_uncorrected_volatile": 0,
        "remapped_rows": (0, 0, 0, 0),
        "throttle": 0x1,  # GPU idle: not a slowdown
    }
    answers.update(overrides)
    return answers


def test_gpus_with_mig_driver_and_cuda():
    migs = [
        {
            "name": "NVIDIA H200 MIG 3g.71gb",
            "uuid": "MIG-a",
            "gi": 1,
            "ci": 0,
            "memory": memory(71424, 0),
            "attributes": SimpleNamespace(multiprocessorCount=60),
        },
        None,  # an empty slot answers NOT_FOUND: no warning
        {
            "name": "NVIDIA H200 MIG 1g.18gb",
            "uuid": "MIG-b",
            "gi": 9,
            "ci": 0,
            "memory": memory(16384, 0),
            "attributes": SimpleNamespace(multiprocessorCount=16),
        },
    ]
    nvml = StandInNvml([gpu(0), gpu(1, mig_mode=[1, 1], mig_slots=3, mig=migs, utilisation=StandInNVMLError(NOT_SUPPORTED))])
    found = discover_nvml(nvml)
    assert nvml.shut_down
    assert (found.tool, found.driver_version, found.runtime) == ("nvml", "550.54.15", {"name": "cuda", "version": "12.4"})
    assert found.warnings == []
    first, second = found.devices
    assert (first.model, first.name, first.index, first.memory_mib, first.memory_used_mib) == ("nvidia-h200", "NVIDIA H200", 0, 143771, 0)
    assert (first.bus_id, first.uuid, first.utilisation_pct, first.health) == (
        "00000000:18:00.0",
        "GPU-00000000-aaaa-bbbb-cccc-ddddeeeeffff",
        0.0,
        "ok",
    )
    assert first.extra == {"pci_id": "10de:2335", "compute_cap": "9.0"}
    assert (second.utilisation_pct, second.memory_used_mib, second.bus_id) == (None, 512, "00000000:19:00.0")
    assert second.extra["mig"] == [
        {
            "device": 0,
            "profile": "3g.71gb",
            "uuid": "MIG-a",
            "gpu_instance_id": 1,
            "compute_instance_id": 0,
            "memory_mib": 71424,
            "multiprocessor_count": 60,
        },
        {
            "device": 2,
            "profile": "1g.18gb",
            "uuid": "MIG-b",
            "gpu_instance_id": 9,
            "compute_instance_id": 0,
            "memory_mib": 16384,
            "multiprocessor_count": 16,
        },
    ]


@pytest.mark.parametrize(
    ("answers", "health", "reason"),
    [
        ({"ecc_uncorrected_volatile": 2}, "abnormal", "volatile uncorrected ECC errors = 2"),
        ({"retired_pending": 1}, "abnormal", "retired pages pending"),
        ({"remapped_rows": (3, 1, 1, 0)}, "abnormal", "remapped rows pending"),
        ({"remapped_rows": (0, 0, 0, 1)}, "abnormal", "row remapping failed"),
        ({"throttle": 0x8}, "warning", "hardware clock slowdown (clock event reasons 0x8)"),
        ({"throttle": 0x40 | 0x1}, "warning", "hardware clock slowdown (clock event reasons 0x41)"),
        ({"throttle": 0x4}, "ok", None),  # software power cap: normal under load
        ({"retired_pending": 0}, "ok", None),
        # A consumer card: ECC, row remapping and clock reasons all NOT_SUPPORTED — no signal.
        ({"ecc_uncorrected_volatile": StandInNVMLError(NOT_SUPPORTED), "remapped_rows": StandInNVMLError(NOT_SUPPORTED)}, "ok", None),
        ({"ecc_uncorrected_volatile": 1, "throttle": 0x8}, "abnormal", "volatile uncorrected ECC errors = 1"),
    ],
)
def test_health_mapping(answers, health, reason):
    found = discover_nvml(StandInNvml([gpu(0, **answers)]))
    [device] = found.devices
    assert device.health == health
    if reason is None:
        assert "health_reasons" not in device.extra and found.warnings == []
    else:
        assert device.extra["health_reasons"][0] == reason
        assert found.warnings == [f"GPU 0 (NVIDIA H200) is {health}: {'; '.join(device.extra['health_reasons'])}"]


def test_one_failing_gpu_does_not_lose_the_others():
    lost = StandInNVMLError(GPU_IS_LOST)
    nvml = StandInNvml([gpu(0), gpu(1, name=lost, memory=lost, uuid=lost), lost, gpu(3)])
    found = discover_nvml(nvml)
    assert [d.index for d in found.devices] == [0, 1, 3]
    broken = found.devices[1]
    # The name is lost, but the PCI id names exactly one catalog model.
    assert (broken.model, broken.name, broken.memory_mib, broken.uuid) == ("nvidia-h200", "PCI 10de:2335", None, "")
    assert broken.extra["matched_by"] == "pci_id"
    assert found.warnings == [
        "GPU 1: nvmlDeviceGetName failed: NVML error 15",
        "GPU 1: nvmlDeviceGetMemoryInfo failed: NVML error 15",
        "GPU 1: nvmlDeviceGetUUID failed: NVML error 15",
        "GPU 2: nvmlDeviceGetHandleByIndex failed: NVML error 15",
        "GPU 2: NVML gave no handle; the GPU is not reported (see the error above)",
    ]


def test_unexpected_answer_for_one_gpu_is_a_warning():
    found = discover_nvml(StandInNvml([gpu(0, memory="not a memory struct"), gpu(1)]))
    assert [d.index for d in found.devices] == [1]
    assert found.warnings[0].startswith("GPU 0: NVML discovery failed (AttributeError")


def test_unknown_gpu_is_named_unknown_not_dropped():
    found = discover_nvml(StandInNvml([gpu(0, name="NVIDIA GeForce RTX 5090", pci_device=0x2B85)], cuda=None))
    [device] = found.devices
    assert device.model == "unknown-nvidia-geforce-rtx-5090" and device.extra["pci_id"] == "10de:2b85"
    assert found.runtime is None
    assert found.warnings == ["'NVIDIA GeForce RTX 5090' is not in the device catalog; registered as unknown-nvidia-geforce-rtx-5090"]


def test_no_gpus_and_count_failure():
    empty = discover_nvml(StandInNvml([]))
    assert empty.devices == [] and empty.warnings == ["nvml: the driver is loaded but reports no GPUs"]
    broken = StandInNvml(StandInNVMLError(GPU_IS_LOST))
    assert try_nvml(broken) == (None, "NVML discovery failed: StandInNVMLError: NVML error 15")
    assert broken.shut_down  # initialised, so shut down again


def test_init_failure_is_a_clean_fallback():
    nvml = StandInNvml([gpu(0)], init_error=StandInNVMLError(9))  # NVML_ERROR_DRIVER_NOT_LOADED
    assert try_nvml(nvml) == (None, "nvmlInit failed: NVML error 9")
    assert not nvml.shut_down


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is None, reason="nvidia-ml-py is not installed")
def test_real_pynvml_without_a_driver_falls_back():
    """The real binding on this machine (no NVIDIA driver): nvmlInit raises, no crash."""
    found, why = try_nvml()
    if found is not None:  # a GPU host: then NVML must have produced a real report
        assert found.tool == "nvml" and found.driver_version
        return
    assert why.startswith("nvmlInit failed: ")
    assert discover_nvml() is None


def test_missing_pynvml_falls_back(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    found, why = try_nvml()
    assert found is None and why.startswith("pynvml is not installed")
    assert discover_nvml() is None
