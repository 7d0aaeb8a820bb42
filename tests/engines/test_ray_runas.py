"""Ray jobs get the task's environment and nothing of the control plane's (issue 14, finding 1),
on the real head of deploy/ray.sh (HETPOOL_TEST_RAY_ADDRESS).

Ray runs every job as a child of a raylet, with the raylet's environment: whatever the shell
that started Ray held. Two layers keep secrets out: the entrypoint starts the command under
`env -i` with a whitelist (backends/ray/environment.py), and deploy/ray.sh starts each Ray
node from a clean environment, so Ray tasks a job starts do not inherit secrets either.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.engines.base import JobPhase, LaunchRequest, WorkerLaunch
from hetpool.engines.ray import RayBackend
from tests.engines.contract import wait_phase

ADDRESS = os.environ.get("HETPOOL_TEST_RAY_ADDRESS", "")
CATALOG = DeviceCatalog.builtin()
REPO = Path(__file__).resolve().parents[2]
CANARY = "postgresql://hetpool:canary-secret-91c4@db.internal/hetpool"
pytestmark = pytest.mark.skipif(not ADDRESS, reason="no Ray head: set HETPOOL_TEST_RAY_ADDRESS=$(deploy/ray.sh start) (the Makefile does)")


# What a job may see of the Ray node's own environment (docs/backends.md#the-ray-backend).
ALLOWED = {"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TERM", "OMP_NUM_THREADS", "GPU_DEVICE_ORDINAL"}
ALLOWED_PREFIXES = ("RAY_", "LC_")
ALLOWED_SUFFIXES = ("_VISIBLE_DEVICES", "_VISIBLE_CORES", "_VISIBLE_CHIPS", "_VISIBLE_MODULES")


def kept(name: str) -> bool:
    return name in ALLOWED or name.startswith(ALLOWED_PREFIXES) or name.endswith(ALLOWED_SUFFIXES)


def nodes() -> list[dict]:
    reply = httpx.get(f"{ADDRESS}/api/v0/nodes?detail=1&limit=100", timeout=10).json()
    return [n for n in reply["data"]["result"]["result"] if n["state"] == "ALIVE"]


def run_env(backend: RayBackend, node: str, env: dict[str, str]) -> dict[str, str]:
    """The environment a job's command sees, as printed by `env -0`."""
    task_id = "t-" + uuid.uuid4().hex[:10]
    request = LaunchRequest(task_id, 1, "env", "ai-lab/nlp", "env -0; printf '\\n'", [WorkerLaunch(0, node, "p", None, [], "", 0.1, 0.0)], env=env)
    handle = backend.submit(request)
    status = wait_phase(backend, handle, {JobPhase.SUCCEEDED, JobPhase.FAILED}, 90)
    text = backend.logs(handle, limit=1 << 20).text
    assert status.phase is JobPhase.SUCCEEDED, (status, text)
    return dict(item.split("=", 1) for item in text.rstrip("\n").split("\0") if "=" in item)


@pytest.fixture
def canary(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HETPOOL_DATABASE_URL", CANARY)
    return CANARY


def test_a_job_sees_its_own_environment_and_only_whitelisted_variables_of_rays(tmp_path: Path, canary: str) -> None:
    head = next(n for n in nodes() if n.get("is_head_node"))
    backend = RayBackend({"address": ADDRESS, "env_passthrough": "HOSTNAME"}, CATALOG, tmp_path / "ray")
    env = run_env(backend, head.get("node_name") or head["node_ip"], {"GREETING": "it's $HOME"})
    assert env["GREETING"] == "it's $HOME" and env["HETPOOL_TENANT"] == "ai-lab/nlp"  # the task's own, literal
    assert env["PATH"] and "RAY_ADDRESS" in env  # what a command needs to run and to call ray.init()
    assert canary not in "\n".join(env.values()) and "HETPOOL_DATABASE_URL" not in env
    # Everything else came from the task (HETPOOL_*, its env) or from the whitelist.
    foreign = sorted(k for k in env if not (k.startswith("HETPOOL_") or k == "GREETING" or kept(k) or k in ("PWD", "SHLVL", "_", "HOSTNAME")))
    assert foreign == [], f"variables of the Ray node's own environment reached the job: {foreign}"


@pytest.fixture
def node_with_secrets() -> Iterator[str]:
    """A Ray node started by deploy/ray.sh from a shell that holds the server's secrets."""
    status = subprocess.run([str(REPO / "deploy" / "ray.sh"), "status"], capture_output=True, text=True, timeout=30)
    if "head running" not in status.stdout:
        pytest.skip(f"the head at {ADDRESS} was not started by deploy/ray.sh on this host")
    name = f"hetpool-shell-{uuid.uuid4().hex[:6]}"
    shell = {**os.environ, "HETPOOL_DATABASE_URL": CANARY, "AWS_SECRET_ACCESS_KEY": "canary-aws-91c4"}
    started = subprocess.run(
        [str(REPO / "deploy" / "ray.sh"), "add-node", name, json.dumps({"CPU": 1})], env=shell, capture_output=True, text=True, timeout=60
    )
    assert started.returncode == 0, started.stderr
    try:
        deadline = time.monotonic() + 60
        while not any(n.get("node_name") == name for n in nodes()):
            assert time.monotonic() < deadline, f"{name} did not join the Ray cluster"
            time.sleep(0.5)
        yield name
    finally:
        subprocess.run([str(REPO / "deploy" / "ray.sh"), "remove-node", name], capture_output=True, text=True, timeout=60)


def test_a_ray_node_started_next_to_the_server_passes_none_of_its_secrets(tmp_path: Path, node_with_secrets: str) -> None:
    pid = int((Path(os.environ.get("HETPOOL_RAY_DIR", "/tmp/hetpool-ray")) / "pids" / f"node-{node_with_secrets}.pid").read_text().split()[0])
    raylet_env = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    assert "canary-secret-91c4" not in raylet_env and "canary-aws-91c4" not in raylet_env  # env -i: Ray tasks inherit nothing
    backend = RayBackend({"address": ADDRESS}, CATALOG, tmp_path / "ray")
    env = run_env(backend, node_with_secrets, {})
    assert env["HETPOOL_NODE"] == node_with_secrets
    assert not [k for k, v in env.items() if "canary-secret-91c4" in v or "canary-aws-91c4" in v], env


def test_env_passthrough_refuses_secret_names(tmp_path: Path) -> None:
    for bad in ("HETPOOL_DATABASE_URL", "DB_PASSWORD", "*TOKEN*", "LD_PRELOAD", "NOT-A-NAME"):
        with pytest.raises(ValueError, match=r"backend_config\.env_passthrough: .*"):
            RayBackend({"address": ADDRESS, "env_passthrough": bad}, CATALOG, tmp_path)
