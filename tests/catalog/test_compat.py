"""The compatibility knowledge base and engine."""

from __future__ import annotations

import pytest

from hetpool.catalog.compat import CompatibilityKB, CompatVerdict, cann_version_key, max_cuda_for_driver, supported_frameworks
from hetpool.catalog.compat_data import parse_rows
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceClass, RuntimeName, RuntimeVersion, SoftwareStack
from hetpool.core.tasks import FrameworkRequest

CATALOG = DeviceCatalog.builtin()
KB = CompatibilityKB.builtin()
A100 = CATALOG.get("nvidia-a100-80g")
B2 = CATALOG.get("ascend-910b2")


def stack(driver: str = "", runtime: str | None = None, version: str = "", **frameworks: str) -> SoftwareStack:
    rt = RuntimeVersion(name=RuntimeName(runtime), version=version) if runtime else None
    return SoftwareStack(driver=driver, runtime=rt, frameworks=frameworks)


def req(name: str, version: str = "", **extras: str) -> FrameworkRequest:
    return FrameworkRequest(name=name, version=version, extras=extras)


def cann(version: str, **frameworks: str) -> SoftwareStack:
    return stack(runtime="cann", version=version, **frameworks)


def test_kb_metadata() -> None:
    # The KB's version is the newest date any row was checked against its source.
    assert KB.version == max(row.checked for row in KB.tables.all_rows())
    assert CompatibilityKB.builtin() is KB
    assert {"pytorch", "mindspore", "paddle", "tensorflow", "jax"} <= set(KB.frameworks())
    assert KB.canonical_framework("Torch") == "pytorch"


def test_no_request_or_none_is_ok() -> None:
    assert KB.check(A100, None, None).ok
    assert KB.check(A100, None, req("none")).ok


@pytest.mark.parametrize("model", CATALOG.by_class(DeviceClass.GPU), ids=lambda m: m.name)
def test_mindspore_never_on_gpus(model) -> None:
    good_stack = stack("580.65.06", "cuda", "13.0") if model.runtime == RuntimeName.CUDA else stack(runtime=model.runtime.value, version="6.4")
    verdict = KB.check(model, good_stack, req("mindspore", "2.3"), has_image=True)
    assert not verdict.ok
    assert verdict.reason == "framework not supported on device"
    assert "Ascend NPUs" in verdict.detail and "GPU" in verdict.detail


def test_mindspore_on_910b_with_cann_8_0_rc2() -> None:
    verdict = KB.check(B2, cann("8.0.RC2"), req("mindspore", "2.3"), has_image=True)
    assert verdict.ok, verdict
    assert any("not verified" in n for n in verdict.notes)
    assert not KB.check(B2, cann("8.0.0"), req("mindspore", "2.3"), has_image=True).ok
    assert KB.check(B2, cann("8.5.0"), req("mindspore", "2.9"), has_image=True).ok
    assert KB.check(CATALOG.get("cpu-arm64"), None, req("mindspore", "2.3"), has_image=True).ok


def test_pytorch_2_4_needs_cann_8_0_rc3_or_later() -> None:
    verdict = KB.check(B2, cann("8.0.RC1"), req("pytorch", ">=2.4,<2.5"), has_image=True)
    assert not verdict.ok
    assert verdict.reason == "CANN version cannot run framework version"
    assert verdict.detail == "CANN 8.0.RC1 supports torch_npu for PyTorch 2.2.0, 2.1.0, 1.11.0; the task needs >=2.4,<2.5"
    for version in ("8.0.RC3", "8.0.0", "8.1.RC1"):
        assert KB.check(B2, cann(version), req("pytorch", "2.4"), has_image=True).ok, version
    # A beta build is looked up as its base release.
    assert KB.check(B2, cann("8.0.RC3.beta1"), req("pytorch", "2.4"), has_image=True).ok


def test_unknown_cann_version_is_reported() -> None:
    verdict = KB.check(B2, cann("8.4.0"), req("pytorch", "2.7"), has_image=True)
    assert verdict.reason == "runtime version not in knowledge base"
    assert verdict.unknown and verdict.status == "unknown" and not verdict.ok
    assert "CompatibilityRule" in verdict.detail
    # The nearest known releases on either side, each row with its source.
    assert any(n.startswith("torch-npu 8.3.") for n in verdict.nearest) and any(n.startswith("torch-npu 8.5.0") for n in verdict.nearest)
    assert all("checked 20" in n for n in verdict.nearest)


def test_cann_version_ordering() -> None:
    ordered = ["7.0.0", "8.0.RC1", "8.0.RC2.alpha002", "8.0.RC2", "8.0.RC3", "8.0.0", "8.0.1", "8.1.RC1", "9.0.0"]
    assert sorted(reversed(ordered), key=cann_version_key) == ordered
    assert cann_version_key("8.0.rc2") == cann_version_key("8.0.RC2")


def test_driver_to_cuda() -> None:
    assert max_cuda_for_driver("535.104.05") == "12.2"
    assert KB.max_cuda_for_driver("550.54.15") == "12.4"
    assert KB.max_cuda_for_driver("580.65.06") == "13.0"
    assert KB.max_cuda_for_driver("470.82.01") == "11.4"
    assert KB.max_cuda_for_driver("390.1") is None
    assert KB.max_cuda_for_driver("") is None


def test_driver_470_runs_cuda_11_8_builds_only_through_minor_version_compat() -> None:
    # torch 2.4 has a CUDA 11.8 build; 11.x minor-version compatibility needs driver >= 450.
    verdict = KB.check(A100, stack("470.82.01"), req("pytorch", "2.4"), has_image=True)
    assert verdict.ok
    assert any("minor-version compatibility" in n for n in verdict.notes)
    # torch 2.8 is built for CUDA 12.6+ only; 12.x needs driver >= 525.
    verdict = KB.check(A100, stack("470.82.01"), req("pytorch", "2.8"), has_image=True)
    assert not verdict.ok
    assert verdict.reason == "driver too old for framework"
    assert "11.4" in verdict.detail and "12.6" in verdict.detail


def test_driver_535_runs_torch_2_4_natively() -> None:
    verdict = KB.check(A100, stack("535.104.05", "cuda", "12.2"), req("pytorch", "2.4"), has_image=True)
    assert verdict.ok
    assert not any("minor-version" in n for n in verdict.notes)  # the 12.1 build runs natively
    assert any("informational" in n for n in verdict.notes)
    # 13.x builds need a 580+ driver even with minor-version compatibility.
    cu130 = KB.check(A100, stack("575.57.08", torch="2.9.0+cu130"), req("pytorch", "2.9"))
    assert cu130.reason == "driver too old for framework"
    assert KB.check(A100, stack("580.65.06", torch="2.9.0+cu130"), req("pytorch", "2.9")).ok


def test_installed_version_when_no_image() -> None:
    node = stack("535.104.05", torch="2.3.1")
    verdict = KB.check(A100, node, req("pytorch", "2.4"))
    assert (verdict.ok, verdict.reason) == (False, "installed framework version does not match")
    assert "2.3.1" in verdict.detail
    # The same node is fine when the task brings an image.
    assert KB.check(A100, node, req("pytorch", "2.4"), has_image=True).ok
    assert KB.check(A100, stack("535.104.05", pytorch="2.4.1+cu121"), req("pytorch", "2.4")).ok
    missing = KB.check(A100, stack("535.104.05", numpy="1.26"), req("pytorch", "2.4"))
    assert missing.reason == "framework not installed"
    # An installed build for a CUDA the driver cannot run is rejected.
    too_new = KB.check(A100, stack("470.82.01", torch="2.4.1+cu124"), req("pytorch", "2.4"))
    assert too_new.reason == "driver too old for framework"
    cpu_build = KB.check(A100, stack("535.104.05", torch="2.4.1+cpu"), req("pytorch", "2.4"))
    assert cpu_build.reason == "installed framework build does not match device"
    # On Ascend, torch_npu runs on top of the stock (CPU) torch wheel.
    assert KB.check(B2, cann("8.0.0", torch="2.4.0+cpu", torch_npu="2.4.0.post2"), req("pytorch", "2.4")).ok


def test_stack_required() -> None:
    assert KB.check(A100, None, req("pytorch", "2.4"), has_image=True).reason == "software stack unknown"
    assert KB.check(B2, stack(driver="24.1.rc2"), req("pytorch")).reason == "software stack unknown"
    mismatch = KB.check(B2, stack("535", "cuda", "12.2"), req("pytorch"), has_image=True)
    assert mismatch.reason == "software stack does not match device runtime"


def test_rocm_and_dtk() -> None:
    mi300x = CATALOG.get("amd-mi300x")
    assert KB.check(mi300x, stack(runtime="rocm", version="6.2.1"), req("pytorch", "2.5"), has_image=True).ok
    old = KB.check(mi300x, stack(runtime="rocm", version="6.0"), req("pytorch", "2.5"), has_image=True)
    assert old.reason == "runtime version cannot run framework version" and "6.2" in old.detail
    k100 = CATALOG.get("hygon-k100")
    # Hygon builds its own PyTorch per DTK release and the tables have no row of them:
    # an explicit "unknown", never the old silent "checked as ROCm".
    verdict = KB.check(k100, stack(runtime="dtk", version="24.04"), req("pytorch", "2.3"), has_image=True)
    assert verdict.status == "unknown" and verdict.reason == "no version table for this runtime" and not verdict.ok
    assert KB.with_policy("allow").check(k100, stack(runtime="dtk", version="24.04"), req("pytorch", "2.3"), has_image=True).ok
    assert KB.check(k100, stack(runtime="dtk", version="24.04"), req("tensorflow"), has_image=True).reason == "framework not supported on device"


def test_other_frameworks_and_runtimes() -> None:
    mlu = CATALOG.get("cambricon-mlu370-x8")
    verdict = KB.check(mlu, stack(runtime="neuware", version="3.15.1"), req("pytorch", "2.1"), has_image=True)
    assert verdict.ok and any("torch_mlu" in n for n in verdict.notes)
    # torch_mlu 1.24.0 for PyTorch 2.1 is built against CNToolkit 3.15.1; older toolkits run older torch_mlu.
    assert KB.check(mlu, stack(runtime="neuware", version="3.13.5"), req("pytorch", "2.4"), has_image=True).ok
    assert not KB.check(mlu, stack(runtime="neuware", version="3.13.5"), req("pytorch", "2.9"), has_image=True).ok
    # A CNToolkit newer than every row (cnmon's driver version 5.10 is no CNToolkit) is unknown.
    assert KB.check(mlu, stack(runtime="neuware", version="5.10.31"), req("pytorch", "2.1"), has_image=True).status == "unknown"
    assert not KB.check(B2, cann("8.0.0"), req("jax"), has_image=True).ok
    bf3 = CATALOG.get("nvidia-bluefield-3")
    assert KB.check(bf3, None, req("dpdk"), has_image=True).ok
    assert KB.check(bf3, None, req("pytorch"), has_image=True).reason == "framework not supported on device"


def test_unknown_framework_and_unknown_release() -> None:
    verdict = KB.check(A100, stack("535"), req("caffe"), has_image=True)
    assert verdict.reason == "unknown framework" and "caffe" in verdict.detail and "pytorch" in verdict.detail
    assert KB.check(A100, stack("580"), req("pytorch", "==3.0"), has_image=True).reason == "no known framework release matches"


def test_vllm_extra() -> None:
    ok = KB.check(A100, stack("535.104.05"), req("pytorch", ">=2.4", vllm=">=0.6"), has_image=True)
    assert ok.ok
    # vLLM 0.6.3 pins torch 2.4.0; with the task pinned to torch 2.3 nothing fits.
    clash = KB.check(A100, stack("535.104.05"), req("pytorch", "2.3", vllm=">=0.6"), has_image=True)
    assert clash.reason == "extra not supported"
    # Installed vLLM must be there when there is no image.
    missing = KB.check(A100, stack("535.104.05", torch="2.4.0"), req("pytorch", "2.4", vllm=">=0.6"))
    assert missing.reason == "extra not installed"
    assert KB.check(A100, stack("535.104.05", torch="2.4.0", vllm="0.6.3"), req("pytorch", "2.4", vllm=">=0.6")).ok
    # Not on Cambricon, not with MindSpore.
    mlu = CATALOG.get("cambricon-mlu370-x8")
    assert KB.check(mlu, stack(runtime="neuware", version="3.15.1"), req("pytorch", vllm=""), has_image=True).reason == "extra not supported"
    assert KB.check(B2, cann("8.0.RC2"), req("mindspore", "2.3", vllm=""), has_image=True).reason == "extra not supported"


def test_vllm_on_ascend_uses_vllm_ascend_matrix() -> None:
    verdict = KB.check(B2, cann("8.5.0"), req("pytorch", vllm=">=0.13"), has_image=True)
    assert verdict.ok
    assert any("vllm-ascend" in n for n in verdict.notes)
    assert KB.check(B2, cann("8.1.RC1"), req("pytorch", vllm="0.7.3"), has_image=True).ok
    # CANN 8.0.RC2 has no vllm-ascend release.
    old = KB.check(B2, cann("8.0.RC2"), req("pytorch", vllm=">=0.6"), has_image=True)
    assert old.reason == "extra not supported" and "vllm-ascend" in old.detail
    # vllm-ascend 0.13.0 needs CANN 8.5.0, not 8.2.RC1.
    assert not KB.check(B2, cann("8.2.RC1"), req("pytorch", vllm="==0.13.0"), has_image=True).ok


def test_unknown_extra_is_allowed_with_a_note() -> None:
    verdict = KB.check(A100, stack("535"), req("pytorch", "2.4", transformers=">=4.40"), has_image=True)
    assert verdict.ok and any("transformers" in n for n in verdict.notes)


def test_operator_rows_add_a_cann_release() -> None:
    node = cann("8.4.0")
    assert KB.check(B2, node, req("pytorch", "2.7"), has_image=True).status == "unknown"
    extended = KB.with_overrides(
        'table: torch-npu\nrows:\n  - {cann: "8.4.0", torch_npu: ["2.7.1.post3", "2.6.0.post4"], source: "site run 2026-11", checked: "2026-11-30"}\n'
    )
    verdict = extended.check(B2, node, req("pytorch", "2.7"), has_image=True)
    assert verdict.ok, verdict
    assert any("from compat overrides" in row for row in verdict.rows)  # the row names where it came from
    # The built-in rows are still there, and the built-in KB is unchanged.
    assert extended.check(B2, cann("8.0.0"), req("pytorch", "2.4"), has_image=True).ok
    assert KB.check(B2, node, req("pytorch", "2.7"), has_image=True).status == "unknown"


def test_operator_rows_add_a_framework_and_are_validated() -> None:
    rows = [{"framework": "onnxruntime", "runtime": r, "check": "any", "source": "site", "checked": "2026-12-01"} for r in ("cuda", "none")]
    extended = KB.with_rows(parse_rows("frameworks", rows, "test"))
    assert extended.check(A100, stack("535"), req("onnxruntime"), has_image=True).ok
    with pytest.raises(SpecError, match="runtime must be one of"):
        KB.with_rows(parse_rows("frameworks", [{**rows[0], "runtime": "opencl"}], "test"))
    with pytest.raises(SpecError, match="quote version numbers"):
        KB.with_overrides('table: torch-npu\nrows: [{cann: 8.4, torch_npu: ["2.7"], source: s, checked: "2026-12-01"}]\n')
    with pytest.raises(SpecError, match="source is required"):
        KB.with_overrides('table: torch-npu\nrows: [{cann: "8.4.0", torch_npu: ["2.7"], checked: "2026-12-01"}]\n')
    with pytest.raises(SpecError, match="unknown column 'torch'"):
        KB.with_overrides('table: torch-npu\nrows: [{cann: "8.4.0", torch: ["2.7"], source: s, checked: "2026-12-01"}]\n')
    with pytest.raises(SpecError, match="unknown table"):
        KB.with_overrides("table: nope\nrows: []\n")
    with pytest.raises(SpecError):
        KB.with_overrides("- not a mapping")


def test_supported_frameworks_view() -> None:
    on_cann = supported_frameworks(B2, cann("8.0.0"))
    assert on_cann["pytorch"] == ["2.4.0", "2.3.1", "2.1.0"]
    assert "tensorflow" not in on_cann and "2.4.0" in on_cann["mindspore"]
    old_driver = KB.supported_frameworks(A100, stack("470.82.01"))
    assert "2.7.1" in old_driver["pytorch"] and "2.8.0" not in old_driver["pytorch"]
    assert "mindspore" not in old_driver


def test_verdict_is_frozen() -> None:
    verdict = CompatVerdict(True)
    with pytest.raises(AttributeError):
        verdict.ok = False  # type: ignore[misc]
