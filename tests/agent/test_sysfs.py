"""/proc and /sys reading (hetpool.agent.sysfs): temporary trees laid out like the real
ones (`vendor` files holding "0x15b3", `class` "0x120000", VFs with a `physfn` link),
and the real /proc and /sys of this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hetpool.agent.discovery import DiscoveredDevice, Discovery
from hetpool.agent.sysfs import ACCELERATOR_CLASSES, ACCELERATOR_VENDORS, cpu_facts, normalise_bus_id, read_pci, scan_pci

X86_CPUINFO = "".join(
    f"processor\t: {cpu}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Platinum 8480+\n"
    f"physical id\t: {cpu // 4}\ncore id\t\t: {cpu % 4 // 2}\nflags\t\t: fpu vme\n\n"
    for cpu in range(8)  # 2 sockets x 2 cores x 2 threads
)
KUNPENG_CPUINFO = "".join(
    f"processor\t: {cpu}\nBogoMIPS\t: 200.00\nFeatures\t: fp asimd\nCPU implementer\t: 0x48\nCPU architecture: 8\n"
    f"CPU variant\t: 0x1\nCPU part\t: 0xd01\nCPU revision\t: 0\n\n"
    for cpu in range(4)
)


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def pci(root: Path, bus_id: str, vendor: str, device: str, cls: str, *, virtual_of: str | None = None) -> None:
    folder = root / "sys" / "bus" / "pci" / "devices" / bus_id
    for name, value in (("vendor", vendor), ("device", device), ("class", cls)):
        write(folder / name, f"0x{value}")
    if virtual_of:
        (folder / "physfn").symlink_to(root / "sys" / "bus" / "pci" / "devices" / virtual_of)


def numa(root: Path, cpulists: list[str]) -> None:
    for node, cpulist in enumerate(cpulists):
        write(root / "sys" / "devices" / "system" / "node" / f"node{node}" / "cpulist", cpulist)
    write(root / "sys" / "devices" / "system" / "node" / "online", f"0-{len(cpulists) - 1}")


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """An Ascend training server with a BlueField-3 and a few bystanders."""
    pci(tmp_path, "0000:00:00.0", "8086", "09a2", "060000")  # Intel host bridge
    pci(tmp_path, "0000:02:00.0", "19e5", "1711", "030000")  # Huawei iBMC VGA: not an accelerator
    pci(tmp_path, "0000:3b:00.0", "19e5", "d801", "120000")  # Ascend 910A
    pci(tmp_path, "0000:3c:00.0", "19e5", "d801", "120000")
    pci(tmp_path, "0000:3c:00.2", "19e5", "d801", "120000", virtual_of="0000:3c:00.0")  # an SR-IOV VF
    pci(tmp_path, "0000:4b:00.0", "15b3", "a2d6", "020000")  # BlueField-2: two ports, one card
    pci(tmp_path, "0000:4b:00.1", "15b3", "a2d6", "020000")
    pci(tmp_path, "0000:5e:00.0", "15b3", "101b", "020700")  # ConnectX-6 NIC: ignored
    pci(tmp_path, "0000:6f:00.0", "cabc", "0370", "120000")  # a Cambricon card the catalog lacks
    pci(tmp_path, "0000:70:00.0", "10de", "22e8", "040300")  # NVIDIA HD audio function: ignored
    pci(tmp_path, "0000:80:00.0", "1af4", "1041", "020000")  # virtio
    return tmp_path


def test_cpu_facts_x86(tmp_path: Path):
    write(tmp_path / "proc" / "cpuinfo", X86_CPUINFO)
    numa(tmp_path, ["0-3", "4-7"])
    assert cpu_facts(tmp_path) == {
        "cpu_model": "Intel(R) Xeon(R) Platinum 8480+",
        "cpu_logical": 8,
        "cpu_physical_cores": 4,
        "cpu_sockets": 2,
        "numa_nodes": 2,
        "numa_cpus": {"0": "0-3", "1": "4-7"},
    }


def test_cpu_facts_arm_without_numa(tmp_path: Path):
    write(tmp_path / "proc" / "cpuinfo", KUNPENG_CPUINFO)
    assert cpu_facts(tmp_path) == {"cpu_model": "HiSilicon Kunpeng-920", "cpu_logical": 4, "numa_nodes": 1}


def test_bus_ids():
    assert normalise_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    assert normalise_bus_id("3b:00.1") == "0000:3b:00.1"
    assert normalise_bus_id("0000:D3:00.0") == "0000:d3:00.0"
    assert normalise_bus_id("N/A") == ""


def test_pci_scan_finds_accelerators_and_dpus(host: Path):
    found = scan_pci(host)
    got = [(d.vendor, d.model, d.index, d.bus_id, d.health) for d in found.devices]
    assert got == [
        ("huawei", "ascend-910a", 0, "0000:3b:00.0", "unknown"),
        ("huawei", "ascend-910a", 1, "0000:3c:00.0", "unknown"),
        ("nvidia", "nvidia-bluefield-2", 0, "0000:4b:00.0", "unknown"),
        ("cambricon", "unknown-cambricon-cabc-0370", 0, "0000:6f:00.0", "unknown"),
    ]
    assert found.devices[2].extra["functions"] == ["0000:4b:00.0", "0000:4b:00.1"]
    assert found.devices[3].name == "PCI device cabc:0370"
    assert found.warnings == [
        "PCI 0000:6f:00.0: PCI device cabc:0370 (cabc:0370, class 1200) is not in the catalog; registered as unknown-cambricon-cabc-0370"
    ]


def test_ambiguous_pci_id_and_pci_ids_names(tmp_path: Path):
    pci(tmp_path, "0000:c1:00.0", "19e5", "d802", "120000")  # 910B: B1..B4 share the id
    pci(tmp_path, "0000:c2:00.0", "1d22", "3685", "120000")
    write(tmp_path / "usr" / "share" / "misc" / "pci.ids", "# pci.ids\n1d22  Baidu Kunlunxin\n\t3684  R300\n\t3685  P800\n\t\t1d22 0001  P800 OAM\n")
    found = scan_pci(tmp_path)
    b, kunlun = found.devices
    assert (b.model, b.extra["candidate_models"][:2]) == ("unknown-huawei-19e5-d802", ["ascend-910b1", "ascend-910b2"])
    assert (kunlun.vendor, kunlun.model, kunlun.name, kunlun.extra["pci_name"]) == ("kunlunxin", "unknown-kunlunxin-1d22-3685", "P800", "P800")
    assert "fits several catalog models" in found.warnings[0] and "P800 (1d22:3685" in found.warnings[1]


def _nvml(*bus_ids: str) -> Discovery:
    devices = [DiscoveredDevice(vendor="nvidia", model="nvidia-h200", name="NVIDIA H200", index=i, bus_id=b) for i, b in enumerate(bus_ids)]
    return Discovery(tool="nvml", devices=devices)


def test_devices_a_tool_reported_are_not_counted_twice(tmp_path: Path):
    for bus in ("18", "2a", "3a"):
        pci(tmp_path, f"0000:{bus}:00.0", "10de", "2335", "030200")  # H200, 3D controller
    pci(tmp_path, "0000:4b:00.0", "15b3", "a2dc", "020000")  # BlueField-3: no tool covers it
    found = scan_pci(tmp_path, reported=[_nvml("00000000:18:00.0", "00000000:2A:00.0")])
    lost, dpu = found.devices
    # NVML ran and does not list the third GPU: the driver has lost it.
    assert (lost.model, lost.bus_id, lost.health) == ("nvidia-h200", "0000:3a:00.0", "abnormal")
    assert lost.extra["health_reasons"] == ["on the PCI bus but not listed by nvml"]
    assert (dpu.model, dpu.health) == ("nvidia-bluefield-3", "unknown")
    assert found.warnings == ["PCI 0000:3a:00.0 (10de:2335) is on the bus but nvml does not list it: reported as abnormal"]


def test_tools_without_bus_ids_use_up_matching_pci_devices(host: Path):
    npu = Discovery(tool="npu-smi", devices=[DiscoveredDevice(vendor="huawei", model="unknown-huawei-910prob", name="910ProB", index=0)])
    found = scan_pci(host, reported=[npu])
    # One Ascend is the one npu-smi printed without a bus id; the other it does not list.
    assert [(d.model, d.bus_id, d.health) for d in found.devices if d.vendor == "huawei"] == [("ascend-910a", "0000:3c:00.0", "abnormal")]
    lspci = Discovery(tool="lspci", devices=[DiscoveredDevice(vendor="huawei", model="ascend-910a", name="x", index=0, bus_id="3b:00.0")])
    again = scan_pci(host, reported=[lspci])  # lspci lists PCI devices; it does not vouch for a driver
    assert [(d.bus_id, d.health) for d in again.devices if d.vendor == "huawei"] == [("0000:3c:00.0", "unknown")]


def test_read_pci_skips_incomplete_entries(host: Path):
    (host / "sys" / "bus" / "pci" / "devices" / "0000:99:00.0").mkdir()
    functions = read_pci(host)
    assert len(functions) == 11 and [f.virtual for f in functions].count(True) == 1
    assert functions[2].pci_id == "19e5:d801" and functions[2].class_code == "1200"


# -- the real machine --------------------------------------------------------------------


def test_this_machines_cpu_and_numa():
    facts = cpu_facts()
    assert facts["numa_nodes"] >= 1 and facts["cpu_logical"] >= 1
    assert facts["cpu_logical"] >= (os.cpu_count() or 1) or facts["cpu_logical"] == len(os.sched_getaffinity(0))
    if Path("/sys/devices/system/node/node0").exists():
        assert "0" in facts["numa_cpus"]


def test_this_machines_pci_bus():
    root = Path("/sys/bus/pci/devices")
    ids = [((d / "vendor").read_text().strip()[2:], (d / "class").read_text().strip()[2:4]) for d in root.glob("*")] if root.exists() else []
    accelerators = [v for v, cls in ids if v in ACCELERATOR_VENDORS and cls in ACCELERATOR_CLASSES] + [v for v, _ in ids if v == "15b3"]
    found = scan_pci()
    if not accelerators:  # a CPU-only machine, like the development and CI machines
        assert found.devices == [] and found.warnings == []
    else:
        assert all(d.bus_id for d in found.devices)
