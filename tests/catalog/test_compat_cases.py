"""Real device × stack × framework cases — the questions operators ask before placing work —
with the verdict the vendors' documents give, and why. Written from the documents, not
from the tables' rows (tests/catalog/test_compat_boundaries.py checks the rows): a case
the tables get wrong is a missing or wrong row, or a misreading of one."""

from __future__ import annotations

import pytest

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import RuntimeName, RuntimeVersion, SoftwareStack
from hetpool.core.tasks import FrameworkRequest

KB = CompatibilityKB.builtin()
CATALOG = DeviceCatalog.builtin()

# (device, stack, framework, version spec, extras, installed?, expected status, why)
CASES = [
    ("nvidia-h100", "driver=535.104.05", "pytorch", "==2.4.1", {}, False, "compatible", "cu121 build; R535 runs CUDA 12.2"),
    ("nvidia-h100", "driver=470.82.01", "pytorch", "==2.1.2", {}, False, "incompatible", "Hopper needs CUDA 11.8, driver >= 520"),
    (
        "nvidia-a100-80g",
        "driver=525.60.13",
        "pytorch",
        "==2.8.0",
        {},
        False,
        "compatible",
        "cu126 on R525 through CUDA 12 minor-version compatibility",
    ),
    ("nvidia-a100-80g", "driver=470.82.01", "pytorch", "==2.8.0", {}, False, "incompatible", "2.8 has only CUDA 12 builds; 12.x needs >= 525"),
    (
        "nvidia-a100-80g",
        "driver=470.82.01",
        "pytorch",
        "==2.4.0",
        {},
        False,
        "compatible",
        "cu118 on R470 through CUDA 11 minor-version compatibility",
    ),
    ("nvidia-v100-32g", "driver=580.65.06,torch=2.9.0+cu130", "pytorch", "==2.9.0", {}, True, "incompatible", "CUDA 13 dropped Volta"),
    ("nvidia-v100-32g", "driver=575.57.08", "pytorch", "==2.9.0", {}, False, "compatible", "the cu126 build still targets sm_70"),
    ("nvidia-b200", "driver=560.35.05", "pytorch", "==2.7.0", {}, False, "incompatible", "Blackwell needs CUDA 12.8, driver >= 570.26"),
    ("nvidia-b200", "driver=570.124.06", "pytorch", "==2.7.0", {}, False, "compatible", "2.7 ships an experimental cu128 build"),
    ("nvidia-b200", "driver=570.124.06", "pytorch", "==2.5.1", {}, False, "incompatible", "no 2.5 build is CUDA 12.8 or later"),
    ("nvidia-l4", "driver=550.54.15", "pytorch", "", {"vllm": "==0.8.5"}, False, "compatible", "vLLM 0.8.5 pins torch 2.6.0 (cu124)"),
    ("nvidia-t4", "driver=550.54.15", "pytorch", "", {"vllm": "==0.6.3"}, False, "compatible", "vLLM needs compute capability 7.0+; T4 is 7.5"),
    ("nvidia-a10", "driver=535.104.05", "jax", "==0.4.30", {}, False, "compatible", "jax[cuda12] needs CUDA >= 12.1; R535 is 12.2"),
    ("nvidia-a100-80g", "driver=470.82.01", "jax", "==0.4.30", {}, False, "incompatible", "no CUDA 11 wheels after 0.4.25; CUDA 12 needs >= 525"),
    ("nvidia-a100-80g", "driver=470.82.01", "jax", "==0.4.20", {}, False, "compatible", "jax[cuda11] wheels until 0.4.25"),
    ("nvidia-a100-80g", "driver=550.54.15", "tensorflow", "==2.16.1", {}, False, "compatible", "built with CUDA 12.3"),
    ("nvidia-a100-80g", "driver=550.54.15", "mindspore", "==2.3.1", {}, False, "incompatible", "MindSpore runs on Ascend and CPU here"),
    ("nvidia-h100", "driver=550.54.15", "vllm", "==0.99.0", {}, False, "unknown", "no such vLLM release in the tables"),
    ("nvidia-h100", "driver=550.54.15", "caffe2", "", {}, False, "unknown", "a framework the tables do not know"),
    ("ascend-910b2", "cann=8.0.RC2", "pytorch", "==2.3.1", {}, False, "compatible", "torch_npu 2.3.1 is built for CANN 8.0.RC2"),
    ("ascend-910b2", "cann=8.0.RC2", "pytorch", "==2.4.0", {}, False, "incompatible", "torch_npu 2.4.0 needs CANN 8.0.RC3 or later"),
    ("ascend-910b2", "cann=8.0.RC3", "pytorch", "==2.4.0", {}, False, "compatible", "torch_npu 2.4.0 is built for CANN 8.0.RC3"),
    ("ascend-910b3", "cann=8.5.0", "mindspore", "==2.9.0", {}, False, "compatible", "MindSpore 2.9.0 installs on CANN 9.0.0 / 8.5.0 / 8.3.RC1"),
    ("ascend-910b3", "cann=8.2.RC1", "mindspore", "==2.9.0", {}, False, "incompatible", "not on 8.2.RC1"),
    ("ascend-910b2", "cann=8.4.0", "pytorch", "", {}, False, "unknown", "CANN 8.4.0 is in no table"),
    (
        "ascend-910a",
        "cann=8.1.RC1",
        "pytorch",
        "",
        {"vllm-ascend": "==0.7.3"},
        False,
        "incompatible",
        "vllm-ascend supports Atlas A2/A3, not the 910A",
    ),
    ("ascend-910b2", "cann=8.1.RC1", "pytorch", "", {"vllm-ascend": "==0.7.3"}, False, "compatible", "vllm-ascend 0.7.3 on CANN 8.1.RC1"),
    ("amd-mi300x", "rocm=5.7.1", "pytorch", "==2.2.2", {}, False, "incompatible", "MI300X support starts with ROCm 6.0"),
    ("amd-mi300x", "rocm=6.2.4", "pytorch", "==2.6.0", {}, False, "compatible", "rocm6.2.4 build"),
    ("amd-mi300x", "rocm=6.1.3", "pytorch", "==2.5.1", {}, False, "incompatible", "2.5 is built for ROCm 6.2"),
    ("amd-mi250x", "rocm=6.0.2", "pytorch", "==2.3.1", {}, False, "compatible", "rocm6.0 build; MI250X is gfx90a"),
    ("hygon-k100", "dtk=24.04", "pytorch", "", {}, False, "unknown", "Hygon's own PyTorch builds are in no table"),
    ("cambricon-mlu370-x8", "neuware=3.15.1", "pytorch", "==2.1.0", {}, False, "compatible", "torch_mlu 1.24.0 for PyTorch 2.1 on CNToolkit 3.15.1"),
    ("kunlunxin-p800", "xre=5.0.21", "pytorch", "", {}, False, "unknown", "no table of the Kunlunxin PyTorch plugin"),
    ("nvidia-bluefield-3", "doca=2.7.0", "dpdk", "", {}, False, "compatible", "DPDK ships with DOCA"),
    ("nvidia-bluefield-3", "doca=2.7.0", "pytorch", "", {}, False, "incompatible", "a DPU runs no PyTorch"),
]


def stack(text: str) -> SoftwareStack:
    values = dict(item.split("=", 1) for item in text.split(","))
    driver = values.pop("driver", "")
    runtime = next(((k, values.pop(k)) for k in list(values) if k in {r.value for r in RuntimeName}), None)
    rt = RuntimeVersion(name=RuntimeName(runtime[0]), version=runtime[1]) if runtime else None
    return SoftwareStack(driver=driver, runtime=rt, frameworks=values)


@pytest.mark.parametrize(("device", "node", "framework", "spec", "extras", "installed", "expected", "why"), CASES, ids=[c[-1] for c in CASES])
def test_real_cases_get_the_verdict_the_documents_give(device, node, framework, spec, extras, installed, expected, why) -> None:
    verdict = KB.check(CATALOG.get(device), stack(node), FrameworkRequest(name=framework, version=spec, extras=extras), has_image=not installed)
    assert verdict.status == expected, f"{why}: got {verdict.status} ({verdict.reason}: {verdict.detail})"
    if expected == "unknown":
        assert not verdict.ok and verdict.reason  # blocked by default, saying why
    assert verdict.rows or expected == "unknown" or framework in ("caffe2",), "a verdict names the rows it rests on"
