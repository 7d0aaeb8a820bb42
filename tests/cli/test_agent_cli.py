"""`hetpool agent` against a real server: a CPU node registers end to end on this machine,
a saved nvidia-smi output stands in for a GPU host, and a silent agent goes offline."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
    assert [n["node"] for n in json.loads(server.cli("describe", "pool", "agent-cpu", "-o", "json").stdout)["nodes"]] == ["agent-cpu-1"]
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


def test_an_uncatalogued_gpu_is_registered_with_its_model(server: Server) -> None:
    xml = FIXTURES / "nvidia-smi-xml" / "telegraf_rtx-3080-v13.xml"
    out = server.cli("agent", "--cluster", "bj-train", "--name", "agent-3080", "--once", "--tool-output", f"nvidia-smi-xml={xml}")
    assert "registered device model unknown-nvidia-geforce-rtx-3080 (NVIDIA GeForce RTX 3080, unverified)" in out.stdout
    node = json.loads(server.cli("describe", "node", "agent-3080", "-o", "json").stdout)
    assert node["devices"] == [{"model": "unknown-nvidia-geforce-rtx-3080", "count": 1, "islands": []}]
    model = json.loads(server.cli("describe", "devicemodel", "unknown-nvidia-geforce-rtx-3080", "-o", "json").stdout)
    assert (model["verified"], model["memory_gb"], model["runtime"], model["aliases"]) == (False, 10.0, "cuda", ["NVIDIA GeForce RTX 3080"])


def test_python_env_frameworks_reach_the_node_stack(server: Server, tmp_path: Path) -> None:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / "torch-2.4.1+cu121.dist-info").mkdir(parents=True)
    (site / "torch-2.4.1+cu121.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: torch\nVersion: 2.4.1+cu121\n\n")
    xml = FIXTURES / "nvidia-smi-xml" / "telegraf_a100-sxm4-v12.xml"
    out = server.cli(
        "agent", "--cluster", "bj-train", "--name", "agent-a100-fw", "--once", "--tool-output", f"nvidia-smi-xml={xml}", "--python-env", str(site)
    )
    assert "frameworks: pytorch 2.4.1+cu121" in out.stdout
    stack = json.loads(server.cli("describe", "node", "agent-a100-fw", "-o", "json").stdout)["stack"]
    assert stack["frameworks"] == {"pytorch": "2.4.1+cu121"} and stack["python"] == "3.11" and stack["runtime"] == {"name": "cuda", "version": "12.2"}
    bad = server.cli("agent", "--cluster", "bj-train", "--once", "--python-env", str(tmp_path / "nope"), check=False)
    assert bad.returncode == 2 and "--python-env" in bad.stderr


def test_killed_agent_goes_offline_within_the_timeout_and_takes_no_work(server: Server, tmp_path: Path) -> None:
    env = {**os.environ, "HETPOOL_URL": server.url, "HETPOOL_TOKEN": server.token or ""}
    cmd = [sys.executable, "-m", "hetpool.cli.main", "agent", "--cluster", "gz-general", "--name", "agent-live", "--interval", "0.5"]
    agent = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        _wait_for(lambda: _status(server, "agent-live") == "ready", 20)
        node = json.loads(server.cli("describe", "node", "agent-live", "-o", "json").stdout)
        pool = tmp_path / "pool.yaml"
        pool.write_text(f"kind: Pool\nname: live-cpu\ncluster: gz-general\nmodel: {node['devices'][0]['model']}\nnodes: [agent-live]\n")
        server.cli("apply", "-f", str(pool))
        time.sleep(2.5)  # longer than the timeout: heartbeats keep it ready
        assert _status(server, "agent-live") == "ready"
    finally:
        agent.kill()  # SIGKILL: no goodbye, only silence
        agent.wait(10)
    killed = time.monotonic()
    _wait_for(lambda: _status(server, "agent-live") == "offline", 15)
    assert time.monotonic() - killed <= 2 + 3  # the timeout (2 s) plus one monitor pass and CLI start-up
    profile = json.loads(server.cli("describe", "pool", "live-cpu", "-o", "json").stdout)
    assert profile["devices"]["offline"] == 1 and profile["devices"]["idle"] == 0
    others = [n["name"] for n in json.loads(server.cli("get", "nodes", "-o", "json").stdout) if n["name"] != "agent-live"]
    task = tmp_path / "task.yaml"
    task.write_text(f"name: cpu-job\ntenant: infra/data/etl\ntemplate: data-prep\nexclude_nodes: {json.dumps(others)}\n")
    plan = json.loads(server.cli("plan", "-f", str(task), "-o", "json").stdout)
    assert plan["feasible"] is False and plan["reasons"].get("node unhealthy or not schedulable") == 1, plan


def _status(server: Server, node: str) -> str:
    """The node's state as the API reports it ("" before registration)."""
    import httpx

    rows = httpx.get(server.url + "/api/v1/nodes/status", headers={"Authorization": f"Bearer {server.token}"}, timeout=10).json()
    return next((s["state"] for s in rows if s["node"] == node), "")


def _wait_for(check, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout_s} s")
        time.sleep(0.3)
