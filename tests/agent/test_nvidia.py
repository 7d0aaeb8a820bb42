"""The NVIDIA parsers against real nvidia-smi outputs (see fixtures/README-nvidia.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hetpool.agent.discovery import parse_tool_output
from hetpool.core.errors import SpecError

FIXTURES = Path(__file__).parent / "fixtures"
XML_DIR = FIXTURES / "nvidia-smi-xml"
CAPTURE_DIR = FIXTURES / "nvidia-smi-captures"

A100 = "telegraf_a100-sxm4-v12.xml"
A10G = "telegraf_a10g.xml"
RTX3080 = "telegraf_rtx-3080-v13.xml"
T4 = "telegraf_tesla-t4.xml"
H100 = "utkuozdemir_linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H100_MIG = "utkuozdemir_linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200 = "utkuozdemir_linux-x86_64__nvidia-h200__590.48.01.txt"
L40S = "utkuozdemir_linux-x86_64__nvidia-l40s__595.80.txt"


def _xml(name: str) -> str:
    return (XML_DIR / name).read_text(encoding="utf-8")


def _capture(name: str) -> str:
    return (CAPTURE_DIR / name).read_text(encoding="utf-8")


def _csv_section(name: str) -> str:
    """The raw `--query-gpu --format=csv` output inside a capture bundle."""
    lines = _capture(name).splitlines()
    start = next(i for i, line in enumerate(lines) if "query-gpu (csv" in line)
    start = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("####")) + 1
    end = next(i for i in range(start, len(lines)) if lines[i].startswith("####"))
    return "\n".join(lines[start:end])


def test_every_fixture_is_covered():
    assert sorted(p.name for p in XML_DIR.iterdir()) == sorted([A100, A10G, RTX3080, T4])
    assert sorted(p.name for p in CAPTURE_DIR.iterdir()) == sorted([H100, H100_MIG, H200, L40S])


# -- nvidia-smi -q -x --------------------------------------------------------------------

XML_CASES = [
    # file, product name, catalog model, memory MiB, driver, CUDA
    (A100, "NVIDIA A100-SXM4-80GB", "nvidia-a100-80g", 81920, "535.54.03", "12.2"),
    (A10G, "NVIDIA A10G", "nvidia-a10", 23028, "515.105.01", "11.7"),
    (T4, "Tesla T4", "nvidia-t4", 15360, "515.105.01", "11.7"),
    (RTX3080, "NVIDIA GeForce RTX 3080", "unknown-nvidia-geforce-rtx-3080", 10240, "595.58.03", "13.2"),
]


@pytest.mark.parametrize(("fixture", "name", "model", "memory", "driver", "cuda"), XML_CASES)
def test_xml_fixture(fixture, name, model, memory, driver, cuda):
    result = parse_tool_output("nvidia-smi-xml", _xml(fixture))
    assert result.tool == "nvidia-smi-xml"
    assert result.driver_version == driver
    assert result.runtime == {"name": "cuda", "version": cuda}
    # The telegraf samples hold one <gpu> each (the A100 log says attached_gpus 4 but lists one).
    assert len(result.devices) == 1
    device = result.devices[0]
    assert (device.vendor, device.name, device.model, device.index) == ("nvidia", name, model, 0)
    assert device.memory_mib == memory
    assert device.health == "ok"
    assert device.uuid.startswith("GPU-")
    assert device.bus_id.startswith("00000000:")


def test_xml_a100_details_and_mig():
    device = parse_tool_output("nvidia-smi-xml", _xml(A100)).devices[0]
    assert device.uuid == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    assert device.bus_id == "00000000:01:00.0"
    assert device.memory_used_mib == 50
    assert device.utilisation_pct is None  # "N/A" in MIG mode
    assert device.extra["mig"] == [
        {"gpu_instance_id": gi, "compute_instance_id": 0, "memory_mib": 19968, "multiprocessor_count": 14} for gi in (3, 4, 5, 6)
    ]


def test_xml_usage_figures():
    rtx = parse_tool_output("nvidia-smi-xml", _xml(RTX3080)).devices[0]
    assert (rtx.memory_used_mib, rtx.utilisation_pct) == (9184, 65.0)
    t4 = parse_tool_output("nvidia-smi-xml", _xml(T4)).devices[0]
    assert (t4.memory_used_mib, t4.utilisation_pct) == (1032, 0.0)
    assert "mig" not in t4.extra


def test_xml_known_models_give_no_warnings_unknown_one_does():
    assert parse_tool_output("nvidia-smi-xml", _xml(A100)).warnings == []
    warnings = parse_tool_output("nvidia-smi-xml", _xml(RTX3080)).warnings
    assert len(warnings) == 1
    assert "RTX 3080" in warnings[0] and "unknown-nvidia-" in warnings[0]


def test_xml_pending_page_retirement_is_abnormal():
    text = _xml(T4).replace("<pending_retirement>No</pending_retirement>", "<pending_retirement>Yes</pending_retirement>")
    result = parse_tool_output("nvidia-smi-xml", text)
    device = result.devices[0]
    assert device.health == "abnormal"
    assert device.extra["health_reasons"] == ["retired_pages/pending_retirement = Yes"]
    assert any("abnormal" in w for w in result.warnings)


def test_xml_volatile_uncorrectable_ecc_is_abnormal():
    text = _xml(A100)
    ecc_start = text.index("<ecc_errors>")
    head, tail = text[:ecc_start], text[ecc_start:]
    tail = tail.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>2</dram_uncorrectable>", 1)
    device = parse_tool_output("nvidia-smi-xml", head + tail).devices[0]
    assert device.health == "abnormal"
    assert device.extra["health_reasons"] == ["ecc_errors/volatile/dram_uncorrectable = 2"]


@pytest.mark.parametrize(
    "text",
    ["", "   ", '{"gpus": []}', "<?xml version='1.0'?><rocm><card/></rocm>", "<nvidia_smi_log><gpu>"],
)
def test_xml_rejects_other_input(text):
    with pytest.raises(SpecError, match=r"nvidia-smi -q -x.*nvidia_smi_log"):
        parse_tool_output("nvidia-smi-xml", text)


def test_xml_wrong_root_is_rejected():
    with pytest.raises(SpecError, match=r"root element is <other>"):
        parse_tool_output("nvidia-smi-xml", "<other><nvidia_smi_log/></other>")


# -- nvidia-smi --query-gpu --format=csv -------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "name", "model", "memory", "compute_cap", "driver"),
    [
        (H100, "NVIDIA H100 80GB HBM3", "nvidia-h100", 81559, "9.0", "590.48.01"),
        (H100_MIG, "NVIDIA H100 80GB HBM3", "nvidia-h100", 81559, "9.0", "590.48.01"),
        (H200, "NVIDIA H200", "nvidia-h200", 143771, "9.0", "590.48.01"),
        (L40S, "NVIDIA L40S", "nvidia-l40s", 46068, "8.9", "595.80"),
    ],
)
def test_csv_from_real_query_gpu_output(fixture, name, model, memory, compute_cap, driver):
    result = parse_tool_output("nvidia-smi-csv", _csv_section(fixture))
    assert result.tool == "nvidia-smi-csv"
    assert result.driver_version == driver
    assert result.runtime is None  # the CSV carries no CUDA version
    assert len(result.devices) == 1
    device = result.devices[0]
    assert (device.vendor, device.name, device.model, device.index) == ("nvidia", name, model, 0)
    assert device.memory_mib == memory
    assert device.extra["compute_cap"] == compute_cap
    assert device.uuid == "GPU-00000000-0000-0000-0000-000000000000"
    assert result.warnings == []


def test_csv_subset_of_columns_and_several_gpus():
    text = (
        "index, name, memory.total [MiB], memory.used [MiB], utilization.gpu [%]\n"
        "0, NVIDIA L40S, 46068 MiB, 100 MiB, 7 %\n"
        "1, NVIDIA GeForce RTX 3080, 10240 MiB, [N/A], [N/A]\n"
    )
    result = parse_tool_output("nvidia-smi-csv", text)
    assert [(d.index, d.model, d.memory_mib) for d in result.devices] == [
        (0, "nvidia-l40s", 46068),
        (1, "unknown-nvidia-geforce-rtx-3080", 10240),
    ]
    assert (result.devices[0].memory_used_mib, result.devices[0].utilisation_pct) == (100, 7.0)
    assert (result.devices[1].memory_used_mib, result.devices[1].utilisation_pct) == (None, None)
    assert result.driver_version is None
    assert len(result.warnings) == 1 and "RTX 3080" in result.warnings[0]


def test_csv_nounits_with_header_and_name_only():
    result = parse_tool_output("nvidia-smi-csv", "name, memory.total\nTesla T4, 15360\n")
    assert [(d.model, d.memory_mib, d.index) for d in result.devices] == [("nvidia-t4", 15360, 0)]
    only_name = parse_tool_output("nvidia-smi-csv", "name\nNVIDIA H200\nNVIDIA H200\n")
    assert [(d.index, d.model, d.memory_mib) for d in only_name.devices] == [
        (0, "nvidia-h200", None),
        (1, "nvidia-h200", None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "0, NVIDIA H100 80GB HBM3, 81559\n",  # --format=csv,noheader
        "index, memory.total [MiB]\n0, 81559 MiB\n",  # no name column
        '[{"name": "NVIDIA H100"}]',
    ],
)
def test_csv_rejects_headerless_or_other_input(text):
    with pytest.raises(SpecError, match=r"--query-gpu=name.*--format=csv"):
        parse_tool_output("nvidia-smi-csv", text)


# -- nvidia_gpu_exporter capture bundles -------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "model", "memory", "driver", "cuda"),
    [
        (H100, "nvidia-h100", 81559, "590.48.01", "13.1"),
        (H100_MIG, "nvidia-h100", 81559, "590.48.01", "13.1"),
        (H200, "nvidia-h200", 143771, "590.48.01", "13.1"),
        (L40S, "nvidia-l40s", 46068, "595.80", "13.2"),
    ],
)
def test_capture_fixture(fixture, model, memory, driver, cuda):
    result = parse_tool_output("nvidia-smi-capture", _capture(fixture))
    assert result.tool == "nvidia-smi-capture"
    assert (result.driver_version, result.runtime) == (driver, {"name": "cuda", "version": cuda})
    assert len(result.devices) == 1
    device = result.devices[0]
    assert (device.model, device.memory_mib, device.health) == (model, memory, "ok")
    assert device.bus_id.startswith("00000000:")
    assert result.warnings == []
    if fixture != H100_MIG:
        assert "mig" not in device.extra


def test_capture_h100_mig_slices():
    device = parse_tool_output("nvidia-smi-capture", _capture(H100_MIG)).devices[0]
    mig = device.extra["mig"]
    assert [m["profile"] for m in mig] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [m["uuid"] for m in mig] == [f"MIG-0000000{i}-0000-0000-0000-00000000000{i}" for i in range(4)]
    assert [(m["gpu_instance_id"], m["compute_instance_id"]) for m in mig] == [(2, 0), (3, 0), (9, 0), (10, 0)]
    assert [m["memory_mib"] for m in mig] == [40448, 20096, 9984, 9984]
    assert [m["multiprocessor_count"] for m in mig] == [60, 32, 16, 16]


def test_capture_without_table_falls_back_to_csv_driver():
    text = "GPU 0: NVIDIA H200 (UUID: GPU-1)\n\nname, driver_version, memory.total [MiB]\nNVIDIA H200, 590.48.01, 143771 MiB\n"
    result = parse_tool_output("nvidia-smi-capture", text)
    assert (result.driver_version, result.runtime) == ("590.48.01", None)
    assert [(d.model, d.memory_mib) for d in result.devices] == [("nvidia-h200", 143771)]


@pytest.mark.parametrize("text", ["", "Driver Version: 590.48.01     CUDA Version: 13.1\n", "<nvidia_smi_log/>"])
def test_capture_rejects_bundles_without_query_gpu(text):
    with pytest.raises(SpecError, match=r"capture bundle.*--query-gpu"):
        parse_tool_output("nvidia-smi-capture", text)
