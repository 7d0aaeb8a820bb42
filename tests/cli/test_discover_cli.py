"""`hetpool discover` through the real CLI on saved tool outputs (tests/agent/fixtures)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "agent" / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def discover(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hetpool.cli.main", "discover", *args], cwd=REPO, input=stdin, capture_output=True, text=True, timeout=60
    )


def test_discover_prints_normalised_json_for_nvidia_xml() -> None:
    result = discover("--tool", "nvidia-smi-xml", "--input", str(FIXTURES / "nvidia-smi-xml" / "telegraf_a100-sxm4-v12.xml"), "-o", "json")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["driver_version"] == "535.54.03"
    assert body["runtime"] == {"name": "cuda", "version": "12.2"}
    assert body["devices"] and all(d["model"] == "nvidia-a100-80g" for d in body["devices"])
    for device in body["devices"]:
        assert {"vendor", "model", "name", "index", "memory_mib", "health"} <= set(device)


def test_discover_reads_stdin_and_maps_pci_ids() -> None:
    line = "3b:00.0 Ethernet controller [0200]: Mellanox Technologies MT42822 BlueField-2 integrated ConnectX-6 Dx network controller [15b3:a2d6]\n"
    result = discover("--tool", "lspci", "-o", "json", stdin=line)
    assert result.returncode == 0, result.stderr
    assert [d["model"] for d in json.loads(result.stdout)["devices"]] == ["nvidia-bluefield-2"]


def test_discover_rejects_unknown_tools_and_wrong_formats() -> None:
    unknown = discover("--tool", "gpu-z", "--input", str(REPO / "README.md"))
    assert unknown.returncode == 2 and "allowed:" in unknown.stderr and "nvidia-smi-xml" in unknown.stderr
    wrong = discover("--tool", "nvidia-smi-xml", "--input", str(REPO / "README.md"))
    assert wrong.returncode == 2 and "expected" in wrong.stderr
    missing = discover("--tool", "npu-smi", "--input", "/nonexistent/file.txt")
    assert missing.returncode == 2 and "--input" in missing.stderr
