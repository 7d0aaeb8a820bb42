"""`plan` shows the unsupported features of the engine that would run the placement, with
their reasons — through the API and in `hetpool plan`'s rendering."""

from __future__ import annotations

from fastapi.testclient import TestClient
from rich.console import Console

from hetpool.cli import render
from hetpool.server.schemas.tasks import PlanResponse

SLURM_CLUSTER = [
    {"kind": "Cluster", "name": "hpc", "backend": "slurm", "backend_config": {"sync": "off"}},
    {"kind": "Node", "name": "s1", "cluster": "hpc", "cpu_cores": 32, "memory_gb": 256, "devices": [{"model": "nvidia-t4", "count": 4}]},
    {"kind": "Pool", "name": "hpc-t4", "cluster": "hpc", "model": "nvidia-t4", "nodes": ["s1"]},
]
TASK = {"name": "where", "tenant": "ai-lab/nlp/llm-sft", "type": "training", "image": "img", "any_of": ["hpc-t4"]}
TASK["per_worker"] = {"devices": {"class": "gpu", "count": 1}}


def test_plan_lists_the_engines_unsupported_features_with_reasons(demo: TestClient, monkeypatch) -> None:
    assert demo.post("/api/v1/apply", json={"documents": SLURM_CLUSTER}).status_code == 200
    plan = demo.post("/api/v1/tasks/plan", json=TASK).json()
    assert plan["feasible"] and plan["backend"]["kind"] == "slurm"
    assert plan["backend"]["unsupported"] == []  # this placement needs nothing Slurm lacks
    limits = {limit["feature"]: limit["reason"] for limit in plan["backend"]["limits"]}
    assert limits["fractional-devices"] == "Slurm allocates whole GRES to one job; hetpool does not share a device between Slurm jobs"
    assert "mixed-devices-on-a-node" in limits

    out = Console(record=True, width=400)
    monkeypatch.setattr(render, "console", out)
    render.plan_report(PlanResponse.model_validate(plan))
    text = out.export_text()
    assert "engine limits: fractional-devices: Slurm allocates whole GRES to one job" in text


RAY_CLUSTER = [
    {"kind": "Cluster", "name": "rl", "backend": "ray", "backend_config": {"address": "http://127.0.0.1:1", "sync": "off"}},
    {"kind": "Node", "name": "r1", "cluster": "rl", "cpu_cores": 32, "memory_gb": 256, "devices": [{"model": "nvidia-t4", "count": 4}]},
    {"kind": "Pool", "name": "rl-t4", "cluster": "rl", "model": "nvidia-t4", "nodes": ["r1"]},
]


def test_plan_says_when_the_engine_cannot_send_the_tasks_checkpoint_signal(demo: TestClient) -> None:
    assert demo.post("/api/v1/apply", json={"documents": RAY_CLUSTER + SLURM_CLUSTER}).status_code == 200
    usr1 = {**TASK, "checkpoint": {"signal": "SIGUSR1", "grace": "30s"}}
    on_ray = demo.post("/api/v1/tasks/plan", json={**usr1, "any_of": ["rl-t4"]}).json()["backend"]
    [gap] = on_ray["unsupported"]
    assert gap["capability"] == "checkpoint-signal" and "RAY_JOB_STOP_SIGNAL" in gap["reason"] and "SIGUSR1" in gap["reason"]
    sigterm = demo.post("/api/v1/tasks/plan", json={**TASK, "any_of": ["rl-t4"], "checkpoint": {"grace": "30s"}}).json()["backend"]
    assert sigterm["unsupported"] == []  # SIGTERM is what Ray sends
    on_slurm = demo.post("/api/v1/tasks/plan", json=usr1).json()["backend"]
    assert on_slurm["kind"] == "slurm" and on_slurm["unsupported"] == []  # scancel --signal sends any of them
