"""The built-in device catalog: content, validation and product-name matching."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from hetpool.catalog.devices import REFERENCE_MODEL, DeviceCatalog, load_device_models_yaml, normalize_product
from hetpool.core.errors import NotFoundError, SpecError
from hetpool.core.inventory import DeviceClass, DeviceModelSpec, RuntimeName, TaskType, Vendor

KNOWN_ENVS = {"CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "MLU_VISIBLE_DEVICES", "XPU_VISIBLE_DEVICES", ""}
REQUIRED = """nvidia-a100-40g nvidia-a100-80g nvidia-h100 nvidia-h800 nvidia-h20 nvidia-h200 nvidia-l40s nvidia-a10
nvidia-t4 nvidia-v100-32g nvidia-rtx-4090 ascend-910a ascend-910b1 ascend-910b2 ascend-910b3 ascend-910b4 ascend-310p
cambricon-mlu370-x8 hygon-k100 hygon-z100 kunlunxin-r300 kunlunxin-p800 amd-mi250x amd-mi300x nvidia-bluefield-2
nvidia-bluefield-3 cpu-x86-64 cpu-arm64""".split()


def _fixtures_dir() -> Path | None:
    for candidate in (Path(__file__).resolve().parents[2] / "shared" / "fixtures" / "discovery", Path("/work/shared/fixtures/discovery")):
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture(scope="module")
def catalog() -> DeviceCatalog:
    return DeviceCatalog.builtin()


def test_builtin_has_required_models_across_all_classes(catalog: DeviceCatalog) -> None:
    assert len(catalog) >= 25
    missing = [name for name in REQUIRED if name not in catalog]
    assert missing == []
    assert {m.device_class for m in catalog.all()} == set(DeviceClass)
    assert len(catalog.by_class(DeviceClass.NPU)) >= 6
    assert [m.name for m in catalog.by_class(DeviceClass.DPU)] == ["nvidia-bluefield-2", "nvidia-bluefield-3"]


def test_builtin_is_cached(catalog: DeviceCatalog) -> None:
    assert DeviceCatalog.builtin() is catalog


def test_every_model_revalidates_and_is_consistent(catalog: DeviceCatalog) -> None:
    for model in catalog.all():
        again = DeviceModelSpec.model_validate(model.model_dump(by_alias=True))
        assert again == model
        assert model.visible_devices_env in KNOWN_ENVS, model.name
        assert model.features == sorted(set(model.features)) and all(f == f.lower() for f in model.features)
        for pci in model.pci_ids:
            assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{4}", pci), (model.name, pci)
        if model.device_class in (DeviceClass.CPU, DeviceClass.DPU):
            assert model.visible_devices_env == ""
        if model.device_class == DeviceClass.DPU:
            assert model.runtime == RuntimeName.DOCA
            assert model.relative_performance == {TaskType.OFFLOAD: 1.0}
        else:
            assert set(model.relative_performance) >= {TaskType.TRAINING, TaskType.INFERENCE, TaskType.GENERAL}


def test_reference_model_and_relative_performance(catalog: DeviceCatalog) -> None:
    ref = catalog.get(REFERENCE_MODEL)
    assert all(v == 1.0 for v in ref.relative_performance.values())
    assert catalog.get("nvidia-h100").perf_for(TaskType.TRAINING) > 2
    # H20: little compute, lots of bandwidth, so better at inference than at training.
    h20 = catalog.get("nvidia-h20")
    assert h20.perf_for(TaskType.INFERENCE) > h20.perf_for(TaskType.TRAINING)
    cpu = catalog.get("cpu-x86-64")
    assert cpu.perf_for(TaskType.PREPROCESSING) == 1.0 and cpu.perf_for(TaskType.TRAINING) < 0.05


def test_vendor_specific_fields(catalog: DeviceCatalog) -> None:
    b2 = catalog.get("ascend-910b2")
    assert (b2.vendor, b2.runtime, b2.k8s_resource) == (Vendor.HUAWEI, RuntimeName.CANN, "huawei.com/Ascend910")
    assert catalog.get("ascend-310p").k8s_resource == "huawei.com/Ascend310P"
    assert catalog.get("hygon-k100").k8s_resource == "hygon.com/dcunum"
    assert catalog.get("nvidia-bluefield-3").pci_ids == ["15b3:a2dc"]
    assert "mig" in catalog.get("nvidia-a100-80g").features and "mig" not in catalog.get("nvidia-l40s").features
    assert not catalog.get("ascend-910b1").verified  # 910B figures are not verified in the reference


@pytest.mark.parametrize(
    ("product", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "nvidia-h100"),
        ("NVIDIA-H100-80GB-HBM3", "nvidia-h100"),  # GFD-sanitised label
        ("nvidia h100 80gb hbm3", "nvidia-h100"),
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100-80g"),
        ("NVIDIA A100 80GB PCIe", "nvidia-a100-80g"),
        ("A100-SXM4-40GB-MIG-1g.5gb", "nvidia-a100-40g"),  # GFD MIG single product
        ("NVIDIA L40S-SHARED", "nvidia-l40s"),
        ("Tesla T4", "nvidia-t4"),
        ("910B2C", "ascend-910b2"),
        ("Ascend 910B2", "ascend-910b2"),
        ("310P3", "ascend-310p"),
        ("MLU370-X8", "cambricon-mlu370-x8"),
        ("K100_AI", "hygon-k100"),
        ("AMD Instinct MI300X", "amd-mi300x"),
        ("AMD_Instinct_MI300X_OAM", "amd-mi300x"),
        ("R300", "kunlunxin-r300"),
    ],
)
def test_match_product(catalog: DeviceCatalog, product: str, expected: str) -> None:
    model = catalog.match_product(product)
    assert model is not None and model.name == expected


def test_match_product_unknown_and_vendor_filter(catalog: DeviceCatalog) -> None:
    assert catalog.match_product("NVIDIA GeForce RTX 3080") is None  # in a fixture, not in the catalog
    assert catalog.match_product("") is None
    assert catalog.match_product("NVIDIA H200", vendor=Vendor.AMD) is None
    assert catalog.match_product("NVIDIA H200", vendor=Vendor.NVIDIA).name == "nvidia-h200"
    assert normalize_product("A100_SXM4-80 GB") == "a100sxm480gb"


def test_match_pci_id(catalog: DeviceCatalog) -> None:
    assert {m.name for m in catalog.match_pci_id("19e5:D802")} >= {"ascend-910b2", "ascend-910b3"}
    assert [m.name for m in catalog.match_pci_id("15b3:a2d6")] == ["nvidia-bluefield-2"]


def test_names_from_discovery_fixtures(catalog: DeviceCatalog) -> None:
    """Product names as they appear in the real tool outputs under shared/fixtures/discovery."""
    root = _fixtures_dir()
    if root is None:
        pytest.skip("shared/fixtures/discovery not available")
    names: dict[str, str] = {}
    for path in (root / "nvidia-smi-xml").glob("*.xml"):
        for name in re.findall(r"<product_name>(.*?)</product_name>", path.read_text()):
            names[name] = path.name
    for path in (root / "nvidia-smi-captures").glob("*.txt"):
        for name in re.findall(r"^GPU \d+: (.+?) \(UUID", path.read_text(), re.MULTILINE):
            names[name] = path.name
    for path in (root / "npu-smi").glob("*_mapping.txt"):
        for line in path.read_text().splitlines()[1:]:
            parts = line.split()
            if len(parts) >= 5 and parts[2] != "-" and parts[3] == "Ascend":
                names[" ".join(parts[3:5])] = path.name
    # hy-smi's default table prints no product name; the fixture README records it.
    if "K100_AI" in (root / "README.md").read_text():
        names["K100_AI"] = "README.md"
    expected = {
        "NVIDIA A100-SXM4-80GB": "nvidia-a100-80g",
        "NVIDIA A10G": "nvidia-a10",
        "Tesla T4": "nvidia-t4",
        "NVIDIA H100 80GB HBM3": "nvidia-h100",
        "NVIDIA H200": "nvidia-h200",
        "NVIDIA L40S": "nvidia-l40s",
        "Ascend 910A": "ascend-910a",
        "K100_AI": "hygon-k100",
    }
    assert set(expected) <= set(names), f"fixture names changed: {sorted(names)}"
    for product, model in expected.items():
        found = catalog.match_product(product)
        assert found is not None and found.name == model, (product, names[product])


def test_get_suggests_close_names(catalog: DeviceCatalog) -> None:
    with pytest.raises(NotFoundError) as err:
        catalog.get("nvidia-a100")
    assert "nvidia-a100-80g" in err.value.message and "did you mean" in err.value.message
    with pytest.raises(NotFoundError):
        catalog.get("zzzz")


OVERRIDE = """
kind: DeviceModel
name: nvidia-a100-80g
vendor: nvidia
class: gpu
display_name: A100 (site tuned)
memory_gb: 80
runtime: cuda
relative_performance: {training: 1.0, inference: 1.1}
---
kind: DeviceModel
name: site-gpu-x
vendor: generic
class: gpu
display_name: Site GPU X
memory_gb: 16
aliases: ["Site GPU X-16"]
"""


def test_with_models_overrides_win_and_builtin_unchanged(catalog: DeviceCatalog) -> None:
    extra = load_device_models_yaml(OVERRIDE, "site.yaml")
    merged = catalog.with_models(extra)
    assert merged.get("nvidia-a100-80g").display_name == "A100 (site tuned)"
    assert merged.match_product("site gpu x 16").name == "site-gpu-x"
    assert len(merged) == len(catalog) + 1
    assert catalog.get("nvidia-a100-80g").display_name == "NVIDIA A100 80GB"
    assert "site-gpu-x" not in catalog


def test_load_rejects_other_kinds_and_bad_fields() -> None:
    with pytest.raises(SpecError):
        load_device_models_yaml("kind: Cluster\nname: c1\n", "x.yaml")
    with pytest.raises(SpecError) as err:
        load_device_models_yaml("kind: DeviceModel\nname: m\nvendor: nvidia\nclass: gpu\ndisplay_name: M\nmemory_gb: 1\ncolour: red\n", "x.yaml")
    assert "colour" in str(err.value.details)
