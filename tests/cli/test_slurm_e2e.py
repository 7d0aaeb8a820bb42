"""A real Slurm cluster (deploy/slurm.sh) imported and kept in sync by a real `hetpool up`
server, observed only through the CLI: nodes appear, a drained node shows as draining
within one sync interval and takes no work, a removed node disappears, and devices busy
with Slurm's own jobs are counted as busy."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.cli.test_cli_e2e import Server
from tests.conftest import database_url
from tests.engines.test_slurm_inventory import SLURM_CONF, _wait, _wait_node_free, dynamic_node, slurm  # noqa: F401 (fixtures)

SYNC_INTERVAL_S = 1.0
H100_TASK = """
name: needs-h100
tenant: ai-lab/nlp/llm-sft
type: training
image: registry.local/pt:2.5
per_worker:
  devices: {class: gpu, models: [nvidia-h100], count: 1}
"""


@pytest.fixture
def server(slurm, tmp_path: Path) -> Iterator[Server]:  # noqa: F811 (the slurm fixture)
    srv = Server(tmp_path / "data", database_url("sqlite", tmp_path))
    srv.start()
    cluster = tmp_path / "hpc.yaml"
    cluster.write_text(
        "kind: Cluster\nname: hpc\nbackend: slurm\nbackend_config:\n"
        f"  conf: {SLURM_CONF}\n  sync_interval_s: '{SYNC_INTERVAL_S}'\n  gres_models: gpu:a100=nvidia-a100-80g\n"
    )
    srv.cli("apply", "-f", str(cluster))
    yield srv
    srv.stop()


def _nodes(server: Server) -> dict[str, str]:
    """Node name -> the STATUS column of `hetpool get nodes`."""
    out = server.cli("get", "nodes").stdout
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in re.split(r"\s{2,}|│|\|", line) if c.strip()]
        if len(cells) >= 3 and cells[1] == "hpc":
            rows[cells[0]] = cells[2]
    return rows


def _until(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    started = time.monotonic()
    _wait(what, check, timeout_s)
    return time.monotonic() - started


def test_slurm_cluster_is_imported_and_kept_in_sync(server: Server, slurm, dynamic_node, tmp_path: Path) -> None:  # noqa: F811
    _until("the Slurm nodes in hetpool", lambda: {"gpu-a100-1", "gpu-h100-1", "npu-910b-1", "cpu-1"} <= set(_nodes(server)), 15)
    nodes = json.loads(server.cli("get", "nodes", "-o", "json").stdout)
    a100 = next(n for n in nodes if n["name"] == "gpu-a100-1")
    assert a100["devices"] == [{"model": "nvidia-a100-80g", "count": 4, "islands": []}]
    assert a100["labels"]["hetpool.io/feature.nvlink"] == "true"
    task_file = tmp_path / "h100.yaml"
    task_file.write_text(H100_TASK)
    assert json.loads(server.cli("plan", "-f", str(task_file), "-o", "json").stdout)["feasible"] is True

    # Drained in Slurm -> draining in hetpool within one sync interval (plus the time the loop takes to notice).
    slurm("scontrol", "update", "nodename=gpu-h100-1", "state=drain", "reason=maint e2e")
    try:
        took = _until("gpu-h100-1 draining", lambda: _nodes(server).get("gpu-h100-1", "").startswith("drain"), SYNC_INTERVAL_S + 5)
        assert took <= SYNC_INTERVAL_S + 3, took
        assert "maint e2e" in _nodes(server)["gpu-h100-1"]
        plan = json.loads(server.cli("plan", "-f", str(task_file), "-o", "json").stdout)
        assert plan["feasible"] is False and plan["reasons"].get("node unhealthy or not schedulable") == 1
    finally:
        slurm("scontrol", "update", "nodename=gpu-h100-1", "state=resume")
    _until("gpu-h100-1 ready again", lambda: _nodes(server).get("gpu-h100-1") == "ready", 10)
    assert json.loads(server.cli("plan", "-f", str(task_file), "-o", "json").stdout)["placements"][0]["node"] == "gpu-h100-1"

    # A node added to Slurm appears; removed, it disappears.
    name, proc = dynamic_node
    _until(f"{name} in hetpool", lambda: name in _nodes(server), 10)
    model = json.loads(server.cli("describe", "devicemodel", "unknown-npu-zz9", "-o", "json").stdout)
    assert model["verified"] is False and model["class"] == "npu"
    proc.terminate()
    slurm("scontrol", "delete", f"nodename={name}")
    _until(f"{name} gone from hetpool", lambda: name not in _nodes(server), SYNC_INTERVAL_S + 5)

    # Devices held by Slurm's own jobs count as busy in the pool's profile.
    job = slurm("sbatch", "--parsable", "-o", "/dev/null", "--wrap", "sleep 30", "--gres=gpu:a100:3", "-w", "gpu-a100-1").strip().split(";")[0]
    try:

        def busy() -> int:
            return json.loads(server.cli("describe", "pool", "hpc-nvidia-a100-80g", "-o", "json").stdout)["devices"]["busy"]

        _until("3 A100 busy", lambda: busy() == 3, 15)
        profile = json.loads(server.cli("describe", "pool", "hpc-nvidia-a100-80g", "-o", "json").stdout)
        assert profile["devices"]["idle"] == 1 and profile["spec"]["labels"]["hetpool.io/auto-pool"] == "true"
    finally:
        slurm("scancel", job)
        _wait_node_free(slurm, "gpu-a100-1")
    summary = server.cli("sync", "hpc").stdout
    assert "cluster/hpc synced from slurm: 4 nodes" in summary
    listed = json.loads(server.cli("sync", "-o", "json").stdout)
    assert listed[0]["cluster"] == "hpc" and listed[0]["ok"] is True
