"""Parsers for Ascend (npu-smi), AMD/Hygon (rocm-smi JSON, hy-smi), Cambricon (cnmon),
Kunlunxin (xpu-smi) and lspci, against the real fixtures in fixtures/ (see
fixtures/README-others.md) and small inline samples where no capture exists."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hetpool.agent.discovery import parse_tool_output
from hetpool.core.errors import SpecError

FIXTURES = Path(__file__).parent / "fixtures"
ATLAS_3000 = "npu-smi/gpustack_ai-server_atlas-800-inference-server_model-3000_version-1.0.11-1.0.15"
ATLAS_9010_RC2 = "npu-smi/gpustack_ai-server_atlas-800-training-server_model-9010_version-24.1.RC2"
ATLAS_9010_RC1 = "npu-smi/gpustack_ai-server_atlas-800-training-server_model-9010_version-6.0.RC1"
BOARD = "npu-smi/mind-cluster-docs_npu-smi-info-t-board_excerpt.txt"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


# -- npu-smi ----------------------------------------------------------------------------


def test_npu_smi_redacted_names_become_unknown_with_warning_and_hbm_memory():
    d = parse_tool_output("npu-smi", fixture(f"{ATLAS_9010_RC2}.txt"))
    assert d.tool == "npu-smi" and d.driver_version == "24.1.RC2" and d.runtime is None
    assert [x.index for x in d.devices] == list(range(8))
    assert {x.model for x in d.devices} == {"unknown-huawei-xxx"}
    assert any("unknown-huawei-xxx" in w for w in d.warnings)
    assert [x.health for x in d.devices] == ["ok", "ok", "ok", "warning", "ok", "ok", "ok", "warning"]
    first = d.devices[0]
    assert (first.vendor, first.name, first.bus_id) == ("huawei", "xxx", "0000:C1:00.0")
    assert (first.memory_mib, first.memory_used_mib, first.utilisation_pct) == (32768, 0, 0.0)
    assert first.extra["ddr_total_mib"] == 15137 and first.extra["npu_id"] == 0
    assert d.devices[3].extra["ddr_total_mib"] == 15039
    # The process table after the chips adds no devices.
    assert len(d.devices) == 8


def test_npu_smi_named_910a_maps_to_catalog():
    d = parse_tool_output("npu-smi", fixture(f"{ATLAS_9010_RC1}.txt"))
    assert d.driver_version == "22.0.3.1"
    assert len(d.devices) == 8 and {x.model for x in d.devices} == {"ascend-910a"}
    assert not d.warnings
    assert [x.bus_id for x in d.devices][:2] == ["0000:61:00.0", "0000:DB:00.0"]
    assert {x.memory_mib for x in d.devices} == {32768}
    assert all(x.health == "ok" for x in d.devices)


def test_npu_smi_old_21_0_4_layout_without_hbm():
    d = parse_tool_output("npu-smi", fixture(f"{ATLAS_3000}.txt"))
    assert d.driver_version == "21.0.4.B030"
    assert [x.index for x in d.devices] == [0, 1, 2, 3]
    assert [x.extra["device_id"] for x in d.devices] == [3, 4, 5, 6]
    assert [x.extra["chip_id"] for x in d.devices] == [0, 1, 2, 3]
    assert {x.extra["npu_id"] for x in d.devices} == {6}
    assert [x.memory_mib for x in d.devices] == [8192] * 4
    assert [x.memory_used_mib for x in d.devices] == [2703, 2867, 2867, 2867]
    assert {x.model for x in d.devices} == {"unknown-huawei-310"}  # 310, not 310P
    assert d.devices[3].bus_id == "0000:8C:00.0"


def test_npu_smi_health_alarm_and_critical_are_abnormal():
    text = fixture(f"{ATLAS_9010_RC1}.txt").replace("| OK  ", "| Alarm", 1).replace("| OK     ", "| Critical", 1)
    d = parse_tool_output("npu-smi", text)
    assert [x.health for x in d.devices[:2]] == ["abnormal", "abnormal"]


@pytest.mark.parametrize("name", [ATLAS_9010_RC2, ATLAS_9010_RC1])
def test_npu_smi_mapping_names_the_910a(name):
    d = parse_tool_output("npu-smi-mapping", fixture(f"{name}_mapping.txt"))
    assert [x.index for x in d.devices] == list(range(8))
    assert {x.model for x in d.devices} == {"ascend-910a"}
    assert {x.name for x in d.devices} == {"Ascend 910A"}
    assert not d.warnings


def test_npu_smi_mapping_skips_the_mcu_row():
    d = parse_tool_output("npu-smi-mapping", fixture(f"{ATLAS_3000}_mapping.txt"))
    assert [(x.index, x.extra["npu_id"], x.extra["chip_id"]) for x in d.devices] == [(0, 6, 0), (1, 6, 1), (2, 6, 2), (3, 6, 3)]
    assert {x.model for x in d.devices} == {"unknown-huawei-minid"}


def test_npu_smi_board_maps_redacted_chip_by_pci_id():
    d = parse_tool_output("npu-smi-board", fixture(BOARD))
    assert d.driver_version == "23.0.5"
    [dev] = d.devices
    assert (dev.index, dev.name, dev.model, dev.bus_id) == (0, "Ascend xxx", "ascend-910a", "0000:61:00.0")
    assert (dev.extra["pci_vendor_id"], dev.extra["pci_device_id"]) == ("19e5", "d801")
    assert dev.extra["firmware_version"] == "7.1.0.7.220"
    assert any("PCI id 19e5:d801" in w for w in d.warnings)


def test_npu_smi_board_ambiguous_pci_id_stays_unknown():
    text = "NPU ID : 1\nSoftware Version : 24.1.0\nPCI Vendor ID : 0x19e5\nPCI Device ID : 0xD802\n"
    d = parse_tool_output("npu-smi-board", text)
    [dev] = d.devices
    assert dev.index == 1 and dev.model.startswith("unknown-huawei-")
    assert dev.extra["candidate_models"] == ["ascend-910b1", "ascend-910b2", "ascend-910b3", "ascend-910b4"]


# -- rocm-smi JSON / hy-smi ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "cards", "driver", "bus0"),
    [("telegraf_mi100_rocm571.json", 6, "6.2.4", "0000:1E:00.0"), ("telegraf_mi100_rocm602.json", 4, "6.3.6", "0000:83:00.0")],
)
def test_rocm_smi_mi100_old_key_casing(name, cards, driver, bus0):
    d = parse_tool_output("rocm-smi-json", fixture(f"rocm-smi-json/{name}"))
    assert [x.index for x in d.devices] == list(range(cards))
    assert d.driver_version == driver and d.runtime is None
    assert {x.vendor for x in d.devices} == {"amd"}
    assert {x.name for x in d.devices} == {"Arcturus GL-XL [Instinct MI100]"}
    assert {x.model for x in d.devices} == {"unknown-amd-instinct-mi100"}  # MI100 is not in the catalog
    assert {x.memory_mib for x in d.devices} == {32752}  # 34342961152 B
    assert d.devices[0].bus_id == bus0 and d.devices[0].utilisation_pct == 0.0


def test_rocm_smi_rx6700xt_new_key_casing():
    d = parse_tool_output("rocm-smi-json", fixture("rocm-smi-json/telegraf_rx6700xt_rocm612.json"))
    [dev] = d.devices
    assert dev.name == "Navi 22 [Radeon RX 6700/6700 XT / 6800M]"
    assert dev.model == "unknown-amd-radeon-rx-6700-6700-xt-6800m"
    assert (dev.memory_mib, dev.memory_used_mib) == (12272, 1499)
    assert dev.extra["gfx_version"] == "gfx1031" and d.driver_version == "6.3.6"


def test_rocm_smi_gpustack_6_2_4_without_system_section():
    d = parse_tool_output("rocm-smi-json", fixture("rocm-smi-json/gpustack_amd-gpu-6.2.4-rocm-smi.json"))
    [dev] = d.devices
    assert dev.name == "Navi 32 [Radeon RX 7700 XT / 7800 XT]"
    assert dev.model == "unknown-amd-radeon-rx-7700-xt-7800-xt"
    assert (dev.memory_mib, dev.memory_used_mib, dev.utilisation_pct) == (16368, 11077, 100.0)
    assert dev.uuid == "0x5c88007d760374f3" and dev.bus_id == ""
    assert d.driver_version is None and d.runtime is None


def test_rocm_smi_hygon_dtk_detected_by_card_vendor():
    data = {
        "card0": {
            "Card Series": "K100_AI",
            "Card Vendor": "Chengdu Haiguang IC Design Co., Ltd.",
            "Device ID": "0x6210",
            "DCU use (%)": "7",
            "vram Total Memory (MiB)": "65520",
            "vram Total Used Memory (MiB)": "128",
        },
        "system": {"Driver version": "6.3.8", "ROCm version": "6.3.0"},
    }
    d = parse_tool_output("rocm-smi-json", json.dumps(data))
    [dev] = d.devices
    assert (dev.vendor, dev.model, dev.memory_mib, dev.memory_used_mib, dev.utilisation_pct) == ("hygon", "hygon-k100", 65520, 128, 7.0)
    assert d.runtime == {"name": "rocm", "version": "6.3.0"} and d.driver_version == "6.3.8"


def test_rocm_smi_json_named_model_maps():
    data = {"card0": {"Card Series": "AMD Instinct MI300X", "Card Vendor": "Advanced Micro Devices, Inc. [AMD/ATI]"}}
    assert parse_tool_output("rocm-smi-json", json.dumps(data)).devices[0].model == "amd-mi300x"


def test_hy_smi_table_without_model_name():
    d = parse_tool_output("hy-smi", fixture("hy-smi/paddlenlp_k100-ai_hy-smi.txt"))
    assert [x.index for x in d.devices] == [0, 1, 2, 3]
    assert {(x.vendor, x.name, x.model) for x in d.devices} == {("hygon", "DCU", "unknown-hygon-dcu")}
    assert any("unknown-hygon-dcu" in w for w in d.warnings)
    assert [x.utilisation_pct for x in d.devices] == [0.0] * 4
    assert [x.extra["power_w"] for x in d.devices] == [118.0, 120.0, 116.0, 138.0]
    assert d.devices[0].memory_mib is None


def test_hy_smi_product_name_lines_name_the_model():
    text = fixture("hy-smi/paddlenlp_k100-ai_hy-smi.txt") + "\nDCU[0] : Card Series: K100_AI\nDCU[1] : Card Series: K100_AI\n"
    d = parse_tool_output("hy-smi", text)
    assert [x.model for x in d.devices] == ["hygon-k100", "hygon-k100", "unknown-hygon-dcu", "unknown-hygon-dcu"]


# -- cnmon / xpu-smi / lspci -------------------------------------------------------------


def test_cnmon_redacted_capture():
    d = parse_tool_output("cnmon", fixture("cnmon/paddlenlp_mlu-redacted_cnmon_v5.10.31.txt"))
    assert d.driver_version == "5.10.31"
    assert [x.index for x in d.devices] == list(range(8))
    assert {(x.vendor, x.name, x.model) for x in d.devices} == {("cambricon", "MLUXXX-XX", "unknown-cambricon-mluxxx-xx")}
    assert {x.memory_mib for x in d.devices} == {None}  # "xxxxx MiB" upstream
    assert {x.memory_used_mib for x in d.devices} == {0}
    assert d.devices[7].bus_id == "0000:D3:00.0" and d.devices[0].extra["firmware"] == "v1.5.0"


CNMON_MLU370 = """\
| CNMON v5.10.13                                               Driver v5.10.13 |
| Card  VF  Name       Firmware |               Bus-Id | Util        Ecc-Error |
| Fan   Temp      Pwr:Usage/Cap |         Memory-Usage | SR-IOV   Compute-Mode |
| 0     /   MLU370-X8    v1.1.6 |         0000:39:00.0 | 0%                N/A |
|  0%   32C        106 W/ 250 W |     0 MiB/ 23374 MiB | N/A           Default |
"""


def test_cnmon_named_card_maps_with_memory():
    d = parse_tool_output("cnmon", CNMON_MLU370)
    [dev] = d.devices
    assert (dev.model, dev.memory_mib, dev.memory_used_mib, d.driver_version) == ("cambricon-mlu370-x8", 23374, 0, "5.10.13")


XPU_SMI = """\
Runtime Version: 4.31
Driver Version: 4.0
  DEVICES
-----------------------------------------------------------------------------------------------------------
| DevID |   PCI Addr   | Model |        SN        |    INODE   | UseRate |     L3     |    Memory    |
-----------------------------------------------------------------------------------------------------------
|     0 | 0000:53:00.0 | R300  | 02K00Y6217V00009 | /dev/xpu0  |     0 % |  0 / 63 MB | 0 / 32768 MB |
|     1 | 0000:56:00.0 | R300  | 02K00Y6217V00010 | /dev/xpu1  |    12 % |  0 / 63 MB | 512 / 32768 MB |
-----------------------------------------------------------------------------------------------------------
"""


def test_xpu_smi_inline_sample():
    d = parse_tool_output("xpu-smi", XPU_SMI)
    assert d.driver_version == "4.0" and d.runtime == {"name": "xre", "version": "4.31"}
    assert [(x.index, x.model, x.memory_mib, x.memory_used_mib, x.utilisation_pct) for x in d.devices] == [
        (0, "kunlunxin-r300", 32768, 0, 0.0),
        (1, "kunlunxin-r300", 32768, 512, 12.0),
    ]
    assert d.devices[1].bus_id == "0000:56:00.0" and d.devices[0].extra["inode"] == "/dev/xpu0"


LSPCI = """\
00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)
3b:00.0 Processing accelerators [1200]: Huawei Technologies Co., Ltd. Device [19e5:d801] (rev 20)
3c:00.0 Processing accelerators [1200]: Huawei Technologies Co., Ltd. Device [19e5:d802] (rev 20)
4b:00.0 Ethernet controller [0200]: Mellanox Technologies MT42822 BlueField-2 integrated ConnectX-6 Dx network controller [15b3:a2d6] (rev 01)
4b:00.1 Ethernet controller [0200]: Mellanox Technologies MT42822 BlueField-2 integrated ConnectX-6 Dx network controller [15b3:a2d6] (rev 01)
0000:ca:00.0 Ethernet controller [0200]: Mellanox Technologies MT43244 BlueField-3 integrated ConnectX-7 network controller [15b3:a2dc] (rev 01)
53:00.0 Co-processor [0b40]: Kunlunxin Technology Device [1d22:3684]
61:00.0 Display controller [0380]: Chengdu Haiguang IC Design Co., Ltd. Device [1d94:6210] (rev 01)
71:00.0 Processing accelerators [1200]: Cambricon Technologies Device [cabc:0370]
81:00.0 Ethernet controller [0200]: Huawei Technologies Co., Ltd. Hi1822 Family [19e5:1822] (rev 45)
"""


def test_lspci_picks_catalogued_devices():
    d = parse_tool_output("lspci", LSPCI)
    got = [(x.vendor, x.model, x.index, x.bus_id) for x in d.devices]
    assert got == [
        ("huawei", "ascend-910a", 0, "0000:3b:00.0"),
        ("huawei", "unknown-huawei-19e5-d802", 1, "0000:3c:00.0"),
        ("nvidia", "nvidia-bluefield-2", 0, "0000:4b:00.0"),
        ("nvidia", "nvidia-bluefield-2", 1, "0000:4b:00.1"),
        ("nvidia", "nvidia-bluefield-3", 2, "0000:ca:00.0"),
        ("kunlunxin", "kunlunxin-r300", 0, "0000:53:00.0"),
        ("hygon", "hygon-k100", 0, "0000:61:00.0"),
        ("cambricon", "unknown-cambricon-technologies-device", 0, "0000:71:00.0"),
    ]
    bf2 = d.devices[2]
    assert bf2.name == "Mellanox Technologies MT42822 BlueField-2 integrated ConnectX-6 Dx network controller"
    assert bf2.extra["pci_id"] == "15b3:a2d6" and bf2.extra["revision"] == "01"
    assert d.devices[1].extra["candidate_models"][0] == "ascend-910b1"
    assert any("19e5:d802" in w for w in d.warnings)


def test_lspci_without_accelerators_is_empty_not_an_error():
    d = parse_tool_output("lspci", "00:00.0 Host bridge [0600]: Intel Corporation Device [8086:09a2] (rev 04)\n")
    assert d.devices == []


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "text", "expected"),
    [
        ("npu-smi", "", "npu-smi info"),
        ("npu-smi", fixture("hy-smi/paddlenlp_k100-ai_hy-smi.txt"), "npu-smi info"),
        ("npu-smi-mapping", fixture(f"{ATLAS_9010_RC2}.txt"), "npu-smi info -m"),
        ("npu-smi-board", "", "-t board"),
        ("rocm-smi-json", fixture("rocm-smi-json/gpustack_amd-gpu-6.2.4-rocminfo.txt"), "not JSON"),
        ("rocm-smi-json", '{"system": {"Driver version": "6.3.6"}}', '"card0"'),
        ("rocm-smi-json", "[1, 2]", '"card0"'),
        ("hy-smi", fixture("cnmon/paddlenlp_mlu-redacted_cnmon_v5.10.31.txt"), "hy-smi"),
        ("cnmon", fixture(f"{ATLAS_3000}.txt"), "cnmon"),
        ("xpu-smi", "", "DevID"),
        ("lspci", "", "lspci -nn"),
        ("lspci", fixture("hy-smi/paddlenlp_k100-ai_hy-smi.txt"), "lspci -nn"),
    ],
)
def test_unrecognised_input_is_a_spec_error(tool, text, expected):
    with pytest.raises(SpecError) as info:
        parse_tool_output(tool, text)
    assert expected in info.value.message


def test_header_without_rows_is_a_spec_error():
    header_only = "\n".join(fixture(f"{ATLAS_9010_RC1}.txt").splitlines()[:6])
    with pytest.raises(SpecError, match="no chip rows"):
        parse_tool_output("npu-smi", header_only)
