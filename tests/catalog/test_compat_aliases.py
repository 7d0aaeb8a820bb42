"""Package names people actually use (vllm-ascend, torch_npu, paddlepaddle, jaxlib …) are
checked under the rules the compatibility KB keeps for them, as a framework name or as
an extra, whatever their case or '-' / '_' spelling."""

from __future__ import annotations

import pytest

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.names import close_matches
from hetpool.core.inventory import RuntimeName, RuntimeVersion, SoftwareStack
from hetpool.core.tasks import FrameworkRequest

CATALOG = DeviceCatalog.builtin()
KB = CompatibilityKB.builtin()
A100 = CATALOG.get("nvidia-a100-80g")
B2 = CATALOG.get("ascend-910b2")
CUDA = SoftwareStack(driver="550.54.15", runtime=RuntimeVersion(name=RuntimeName("cuda"), version="12.4"))


def cann(version: str, **installed: str) -> SoftwareStack:
    return SoftwareStack(runtime=RuntimeVersion(name=RuntimeName("cann"), version=version), frameworks=installed)


def fw(name: str, version: str = "", extras: dict | None = None) -> FrameworkRequest:
    return FrameworkRequest(name=name, version=version, extras=extras or {})


@pytest.mark.parametrize(
    ("spelling", "canonical"),
    [
        ("torch", "pytorch"),
        ("Torch_NPU", "pytorch"),
        ("torch-npu", "pytorch"),
        ("paddlepaddle", "paddle"),
        ("PaddlePaddle-GPU", "paddle"),
        ("paddle", "paddle"),
        ("MindSpore", "mindspore"),
        ("jaxlib", "jax"),
        ("tensorflow-gpu", "tensorflow"),
        ("pytorh", None),
    ],
)
def test_package_names_map_to_what_the_kb_knows(spelling: str, canonical: str | None) -> None:
    assert KB.canonical_framework(spelling) == canonical


@pytest.mark.parametrize("spelling", ["vllm-ascend", "vllm_ascend", "VLLM-Ascend"])
def test_vllm_ascend_as_an_extra_is_checked_against_the_vllm_ascend_matrix(spelling: str) -> None:
    # Was: "extra 'vllm-ascend' is not in the compatibility KB; not checked", and ok everywhere.
    ok = KB.check(B2, cann("8.1.RC1"), fw("pytorch", extras={spelling: "0.7.3"}), has_image=True)
    assert ok.ok, ok
    assert not any("not checked" in n for n in ok.notes)
    # vllm-ascend 0.13.0 needs CANN 8.5.0.
    wrong_cann = KB.check(B2, cann("8.2.RC1"), fw("pytorch", extras={spelling: "==0.13.0"}), has_image=True)
    assert not wrong_cann.ok and wrong_cann.reason == "extra not supported"
    # The Ascend plugin on an NVIDIA GPU: refused, saying why.
    on_gpu = KB.check(A100, CUDA, fw("pytorch", ">=2.4", extras={spelling: ">=0.6"}), has_image=True)
    assert not on_gpu.ok and "Ascend NPUs" in on_gpu.detail


@pytest.mark.parametrize("spelling", ["vllm-ascend", "vllm_ascend"])
def test_vllm_ascend_as_the_framework_name_means_pytorch_with_the_extra(spelling: str) -> None:
    assert KB.check(B2, cann("8.1.RC1"), fw(spelling, "0.7.3"), has_image=True).ok
    assert not KB.check(B2, cann("8.2.RC1"), fw(spelling, "==0.13.0"), has_image=True).ok
    on_gpu = KB.check(A100, CUDA, fw(spelling, ">=0.6"), has_image=True)
    assert not on_gpu.ok and "Ascend NPUs" in on_gpu.detail
    # Plain vllm as a framework: PyTorch + vLLM, on GPUs as on Ascend.
    assert KB.check(A100, CUDA, fw("vllm", ">=0.6"), has_image=True).ok


def test_torch_npu_is_pytorch_on_ascend_only() -> None:
    assert KB.check(B2, cann("8.1.RC1"), fw("torch_npu", "2.5.1"), has_image=True).ok
    on_gpu = KB.check(A100, CUDA, fw("torch_npu"), has_image=True)
    assert not on_gpu.ok and on_gpu.reason == "framework not supported on device" and "Ascend NPUs" in on_gpu.detail


def test_installed_packages_are_matched_by_package_name() -> None:
    stack = cann("8.1.RC1", torch="2.5.1", torch_npu="2.5.1", vllm_ascend="0.7.3")
    assert KB.check(B2, stack, fw("torch", "2.5.1", extras={"vllm-ascend": "0.7.3"})).ok
    mismatch = KB.check(B2, stack, fw("torch", "2.5.1", extras={"vllm-ascend": "0.9.1"}))
    assert not mismatch.ok and mismatch.reason == "installed extra version does not match"


def test_framework_names_offer_close_matches_for_typos() -> None:
    names = KB.framework_names()
    assert {"pytorch", "torch", "torch-npu", "vllm", "vllm-ascend", "none"} <= set(names)
    assert close_matches("pytorh", names)[0] == "pytorch"
    assert close_matches("vllm_ascnd", names)[0] == "vllm-ascend"
