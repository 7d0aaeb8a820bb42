"""`hetpool agent` against a real server: a CPU node registers end to end on this machine,
a saved nvidia-smi output stands in for a GPU host, and a silent agent goes offline."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from tests.cli.test_cli_e2e import Server
from tests.conftest import database_url

FIXTURES = Path(__file__).resolve().parents[1] / "agent" / "fixtures"


@pytest.fixture
def server(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("HETPOOL_HEARTBEAT_TIMEOUT_S", "2")  # inherited by the server process
    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    yield srv
    srv.stop()


def test_cpu_host_registers_and_goes_offline_when_silent(server: Server, tmp_path: Path) -> None:
    out = server.cli("agent", "--cluster", "gz-general", "--name", "agent-cpu-1", "--once")
    assert "registered node agent-cpu-1" in out.stdout
    node = json.loads(server.cli("describe", "node", "agent-cpu-1", "-o", "json").stdout)
    cpu_model = "cpu-arm64" if node["arch"] == "aarch64" else "cpu-x86-64"
    assert node["cpu_cores"] == os.cpu_count() and node["devices"] == [{"model": cpu_model, "count": 1, "islands": []}]
    # The demo's CPU pool declares a different stack, so the agent's nodes get a pool of their own.
    pool = tmp_path / "pool.yaml"
    pool.write_text(f"kind: Pool\nname: agent-cpu\ncluster: gz-general\nmodel: {cpu_model}\nnodes: [agent-cpu-1]\n")
    server.cli("apply", "-f", str(pool))
    server.cli("agent", "--cluster", "gz-general", "--pool", "agent-cpu", "--name", "agent-cpu-1", "--once")  # idempotent
    assert json.loads(server.cli("describe", "pool", "agent-cpu", "-o", "json").stdout)["nodes"] == ["agent-cpu-1"]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:  # no more heartbeats: offline after 2 s
        events = json.loads(server.cli("audit", "list", "--object", "agent-cpu-1", "-o", "json").stdout)
        if any(e["action"] == "node.status" and e["after"] == {"state": "offline"} for e in events):
            break
        time.sleep(0.5)
    else:
        raise AssertionError("the silent agent's node never went offline")


def test_gpu_host_from_a_saved_tool_output(server: Server) -> None:
    xml = FIXTURES / "nvidia-smi-xml" / "telegraf_a100-sxm4-v12.xml"
    server.cli("agent", "--cluster", "bj-train", "--name", "agent-a100", "--once", "--tool-output", f"nvidia-smi-xml={xml}")
    node = json.loads(server.cli("describe", "node", "agent-a100", "-o", "json").stdout)
    assert node["devices"] == [{"model": "nvidia-a100-80g", "count": 1, "islands": []}]
    assert node["stack"]["driver"] == "535.54.03" and node["stack"]["runtime"] == {"name": "cuda", "version": "12.2"}
    bad = server.cli("agent", "--cluster", "nope", "--once", "--name", "x", check=False)
    assert bad.returncode == 2 and "unknown cluster 'nope'" in bad.stderr
