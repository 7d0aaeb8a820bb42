"""describe_host: NVML first (nvidia-smi only when NVML is unusable), the vendor tools,
the PCI scan without double counting, frameworks into the stack, and unknown models
registered as DeviceModel documents instead of being dropped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from hetpool.agent.host import describe_host
from hetpool.core.inventory import DeviceModelSpec, NodeSpec
from tests.agent.test_frameworks import dist_info
from tests.agent.test_nvml import StandInNvml, StandInNVMLError, gpu
from tests.agent.test_sysfs import X86_CPUINFO, numa, pci, write

FIXTURES = Path(__file__).parent / "fixtures" / "nvidia-smi-xml"


@pytest.fixture
def path_with_nvidia_smi(tmp_path: Path, monkeypatch) -> Path:
    """PATH holding only an `nvidia-smi` that prints a real A100 `-q -x` capture and
    leaves a marker file, so a test can tell whether the agent ran it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    marker = tmp_path / "nvidia-smi-ran"
    script = bin_dir / "nvidia-smi"
    fixture = FIXTURES / "telegraf_a100-sxm4-v12.xml"
    script.write_text(
        f"#!{sys.executable}\nimport pathlib\npathlib.Path({str(marker)!r}).touch()\nprint(pathlib.Path({str(fixture)!r}).read_text(), end='')\n"
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return marker


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A filesystem root: two H200s, a BlueField-3 and a Cambricon card the catalog lacks."""
    root = tmp_path / "root"
    write(root / "proc" / "cpuinfo", X86_CPUINFO)
    numa(root, ["0-3", "4-7"])
    write(root / "etc" / "os-release", 'PRETTY_NAME="Ubuntu 22.04.4 LTS"')
    pci(root, "0000:18:00.0", "10de", "2335", "030200")
    pci(root, "0000:19:00.0", "10de", "2335", "030200")
    pci(root, "0000:4b:00.0", "15b3", "a2dc", "020000")
    pci(root, "0000:6f:00.0", "cabc", "0370", "120000")
    return root


@pytest.fixture
def env(tmp_path: Path) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    dist_info(site, "torch", "2.4.1+cu121")
    dist_info(site, "vllm", "0.6.3")
    return site


def test_nvml_first_then_pci_scan_and_frameworks(path_with_nvidia_smi: Path, root: Path, env: Path):
    report = describe_host("bj-train", "gpu-1", python_envs=[env], sysfs_root=root, nvml_module=StandInNvml([gpu(0), gpu(1)]))
    assert not path_with_nvidia_smi.exists()  # NVML worked: nvidia-smi is not run
    node = report.node
    assert node["devices"] == [
        {"model": "nvidia-h200", "count": 2},  # from NVML; the PCI scan matches them by bus id
        {"model": "nvidia-bluefield-3", "count": 1},
        {"model": "unknown-cambricon-cabc-0370", "count": 1},
    ]
    assert node["stack"] == {
        "driver": "550.54.15",
        "runtime": {"name": "cuda", "version": "12.4"},
        "frameworks": {"pytorch": "2.4.1+cu121", "vllm": "0.6.3"},
        "python": "3.11",
        "os": "Ubuntu 22.04.4 LTS",
    }
    NodeSpec.model_validate({"kind": "Node", **node})
    [model] = report.models
    assert model == {
        "kind": "DeviceModel",
        "name": "unknown-cambricon-cabc-0370",
        "vendor": "cambricon",
        "class": "gpu",
        "display_name": "PCI device cabc:0370",
        "memory_gb": 0,
        "runtime": "neuware",
        "verified": False,
        "aliases": ["PCI device cabc:0370"],
        "pci_ids": ["cabc:0370"],
    }
    assert DeviceModelSpec.model_validate(model).verified is False
    assert [(r["model"], r["index"], r["health"]) for r in report.devices] == [
        ("nvidia-h200", 0, "ok"),
        ("nvidia-h200", 1, "ok"),
        ("nvidia-bluefield-3", 0, "unknown"),
        ("unknown-cambricon-cabc-0370", 0, "unknown"),
    ]
    assert report.devices[1]["utilisation_pct"] == 10.0 and report.devices[1]["memory_used_mib"] == 512
    assert report.facts["nvml"] == "ok" and report.facts["cpu_model"] == "Intel(R) Xeon(R) Platinum 8480+" and report.facts["numa_nodes"] == 2
    assert report.facts["torch_build"] == {"name": "cuda", "version": "12.1"}
    assert any("unknown-cambricon-cabc-0370: not in the catalog; registered with an unverified DeviceModel" in w for w in report.warnings)


def test_without_nvml_the_agent_runs_nvidia_smi(path_with_nvidia_smi: Path, tmp_path: Path):
    nvml = StandInNvml([gpu(0)], init_error=StandInNVMLError(9))
    report = describe_host("bj-train", "gpu-2", sysfs_root=tmp_path / "empty", nvml_module=nvml)
    assert path_with_nvidia_smi.exists()
    assert report.node["devices"] == [{"model": "nvidia-a100-80g", "count": 1}]
    assert report.node["stack"]["driver"] == "535.54.03" and report.facts["nvml"] == "nvmlInit failed: NVML error 9"
    assert report.models == []


def test_saved_outputs_register_unknown_models(tmp_path: Path):
    xml = (FIXTURES / "telegraf_rtx-3080-v13.xml").read_text(encoding="utf-8")
    report = describe_host("bj-train", "desk-1", {"nvidia-smi-xml": xml})  # the old positional call
    assert "nvml" not in report.facts  # saved outputs: no live NVML or PCI discovery
    assert report.node["devices"] == [{"model": "unknown-nvidia-geforce-rtx-3080", "count": 1}]
    assert report.devices == [
        {"index": 0, "model": "unknown-nvidia-geforce-rtx-3080", "health": "ok", "utilisation_pct": 65.0, "memory_used_mib": 9184}
    ]
    [model] = report.models
    assert (model["class"], model["runtime"], model["memory_gb"], model["aliases"]) == ("gpu", "cuda", 10.0, ["NVIDIA GeForce RTX 3080"])
    assert "pci_ids" not in model
    DeviceModelSpec.model_validate(model)


def test_torch_build_is_a_runtime_hint_only_where_no_tool_gave_one(tmp_path: Path, root: Path, env: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    no_driver = StandInNvml([], init_error=StandInNVMLError(12))  # NVML_ERROR_LIBRARY_NOT_FOUND
    report = describe_host("bj-train", "gpu-3", python_envs=[env], sysfs_root=root, nvml_module=no_driver)
    # No driver: the GPUs come from the PCI scan, the runtime from torch's build label.
    assert report.node["devices"][0] == {"model": "nvidia-h200", "count": 2}
    assert report.node["stack"]["runtime"] == {"name": "cuda", "version": "12.1"} and "driver" not in report.node["stack"]
    assert "runtime: no device tool reported one; using cuda 12.1 from torch 2.4.1+cu121's build label" in report.warnings
    rocm = tmp_path / "rocm-env"
    rocm.mkdir()
    dist_info(rocm, "torch", "2.5.1+rocm6.2")
    mismatch = describe_host("bj-train", "gpu-3", python_envs=[rocm], sysfs_root=root, nvml_module=StandInNvml([gpu(0), gpu(1)]))
    assert mismatch.node["stack"]["runtime"] == {"name": "cuda", "version": "12.4"}
    assert "torch 2.5.1+rocm6.2 is built for rocm but the node's runtime is cuda 12.4" in mismatch.warnings
    cpu_only = describe_host("gz", "cpu-1", python_envs=[env], sysfs_root=tmp_path / "bare", nvml_module=no_driver)
    assert cpu_only.node["devices"] == [{"model": "cpu-x86-64" if cpu_only.node["arch"] == "x86_64" else "cpu-arm64", "count": 1}]
    assert "runtime" not in cpu_only.node["stack"] and cpu_only.facts["torch_build"] == {"name": "cuda", "version": "12.1"}


def test_a_long_unknown_name_still_makes_a_valid_model_name(tmp_path: Path):
    name = "NVIDIA Some Very Long Engineering Sample Product Name That Goes On And On 96GB"
    nvml = StandInNvml([gpu(0, name=name, pci_device=0x9999)])
    report = describe_host("bj-train", "gpu-4", sysfs_root=tmp_path / "bare", nvml_module=nvml, saved={})
    [model] = report.models
    assert len(model["name"]) <= 63 and model["name"].startswith("unknown-nvidia-some-very-long")
    assert report.node["devices"] == [{"model": model["name"], "count": 1}] and report.devices[0]["model"] == model["name"]
    assert model["pci_ids"] == ["10de:9999"] and model["memory_gb"] == 140.4
    NodeSpec.model_validate({"kind": "Node", **report.node})
    DeviceModelSpec.model_validate(model)


NPU = Path(__file__).parent / "fixtures" / "npu-smi"


@pytest.mark.parametrize("version", ["24.1.RC2", "6.0.RC1"])
def test_npu_smi_info_and_its_mapping_describe_each_chip_once(version: str) -> None:
    """Regression: given both `npu-smi info` and `npu-smi info -m`, an 8-chip server
    registered 16 devices. The same chip (NPU id, chip id) is one device; the mapping's
    chip name fills in a model the info table left unknown."""
    base = f"gpustack_ai-server_atlas-800-training-server_model-9010_version-{version}"
    info, mapping = ((NPU / f"{base}{suffix}.txt").read_text(encoding="utf-8") for suffix in ("", "_mapping"))
    report = describe_host("bj-train", "npu-1", {"npu-smi": info, "npu-smi-mapping": mapping})
    assert report.node["devices"] == [{"model": "ascend-910a", "count": 8}]
    assert sorted(d["index"] for d in report.devices) == list(range(8))
    assert report.models == []  # nothing left unknown to register
    alone = describe_host("bj-train", "npu-1", {"npu-smi-mapping": mapping})
    assert alone.node["devices"] == [{"model": "ascend-910a", "count": 8}]
