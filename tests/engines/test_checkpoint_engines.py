"""Checkpoint-aware preemption on real engines: a real `hetpool up --demo` server with
deploy/slurm.sh's cluster and deploy/ray.sh's head imported. A low-priority task that
declares `checkpoint` fills a pool; a high-priority task preempts it; the engine delivers
the stop signal (Slurm: `scancel --signal=USR1`; Ray: its job stop, SIGTERM), the task
writes its step into HETPOOL_CHECKPOINT_DIR and exits, and its next attempt resumes from
that step (HETPOOL_RESUME=1), not from zero. The local engine: tests/server/test_checkpoint_resume.py.

In the "shared-engines" xdist group (tests/conftest.py): the victim takes a whole pool.
"""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from tests.engines.test_engine_faults import RAY_ADDRESS, SLURM_CONF, _api, _submit, _tasks, _until, server  # noqa: F401 (fixture)
from tests.engines.test_ray_inventory import _ray_sh
from tests.server.test_checkpoint_resume import STEPPER, STEPPER_FOR

ENGINES = {
    # engine: (pool, device class, devices in the pool, the signal the task asks for)
    "slurm": ("hpc-nvidia-h100", "gpu", 8, "USR1"),
    "ray": ("ray-lab-ascend-910b3", "npu", 8, "TERM"),
}


def _task(tenant: str, pool: str, device_class: str, count: int, **fields) -> dict:
    per_worker = {"devices": {"class": device_class, "count": count}, "cpu": 0.5, "memory_gb": 0.5}
    return {"tenant": tenant, "type": "training", "per_worker": per_worker, "any_of": [pool], **fields}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_preempted_task_resumes_from_its_checkpoint_on_a_real_engine(server, engine: str) -> None:  # noqa: F811
    pool, device_class, count, signal = ENGINES[engine]
    api = _api(server)
    _until(f"the {engine} pool imported", lambda: api.get(f"/objects/pools/{pool}").status_code == 200, 30)
    checkpoint = {"signal": f"SIG{signal}", "grace": "30s"}
    command = STEPPER_FOR.replace("SIGNAL", signal)
    victim_spec = _task("ai-lab/nlp/llm-sft", pool, device_class, count, priority="low", checkpoint=checkpoint, command=command)
    low = _submit(api, victim_spec, f"ckpt-{engine}")
    logs = lambda: api.get(f"/tasks/{low}/logs").json()["text"]  # noqa: E731
    _until("the victim running and stepping", lambda: _tasks(api, [low])[low]["state"] == "running" and "started at step 0" in logs(), 90)
    time.sleep(1)  # some steps done (one per 0.05 s), so a resume from step 0 would show
    high = _submit(api, _task("ai-lab/nlp/llm-sft", pool, device_class, 1, priority="high", command="echo urgent-done"), f"urgent-{engine}")
    _until("the preemptor done", lambda: _tasks(api, [high])[high]["state"] == "succeeded", 120)
    victim = _tasks(api, [low])[low]
    actions = [e["action"] for e in victim["events"]]
    assert "task.stop_signalled" in actions and "task.preempted" in actions, actions
    assert victim["checkpoint"]["progress_s"] > 0 and victim["checkpoint"]["resume_from"] == 1, victim["checkpoint"]
    _until("attempt 2 resumed", lambda: _tasks(api, [low])[low]["attempt"] == 2 and "resumed from attempt 1" in logs(), 120)
    resumed = re.search(r"resumed from attempt 1 at step (\d+)", logs())
    assert resumed and int(resumed.group(1)) > 0, logs()
    assert api.post(f"/tasks/{low}/cancel").status_code == 200
    _until("the victim cancelled", lambda: _tasks(api, [low])[low]["state"] == "cancelled", 90)


def test_a_migration_moves_a_checkpointed_slurm_job_to_the_faster_nodes(server) -> None:  # noqa: F811
    """A100 → H100 on the Slurm cluster: the move is a graceful stop (scancel --signal) and a
    resume on the H100 node, from the checkpoint. Ray: the test below."""
    api = _api(server)
    _until("the Slurm pools imported", lambda: api.get("/objects/pools/hpc-nvidia-h100").status_code == 200, 30)
    pools = [p["name"] for p in api.get("/objects/pools").json()]
    a100 = next(p for p in pools if p.startswith("hpc-nvidia-a100"))
    _migrating_queue(api)
    blocker = _submit(api, _task("ai-lab/nlp/llm-sft", "hpc-nvidia-h100", "gpu", 8, command="sleep 4"), "blocker")
    _until("the blocker running", lambda: _tasks(api, [blocker])[blocker]["state"] == "running", 90)
    spec = _task("ai-lab/nlp/llm-sft", a100, "gpu", 4, checkpoint={"signal": "SIGUSR1", "grace": "30s"}, command=STEPPER)
    spec |= {"any_of": [], "fallback": ["hpc-nvidia-h100", a100], "runtime_estimate": "10h"}
    mover = _submit(api, spec, "mover")
    logs = lambda: api.get(f"/tasks/{mover}/logs").json()["text"]  # noqa: E731
    _until("the mover stepping on the A100s", lambda: "started at step 0" in logs(), 90)
    assert _tasks(api, [mover])[mover]["placements"][0]["pool"] == a100
    _until("moved and resumed", lambda: _tasks(api, [mover])[mover]["attempt"] == 2 and "resumed from attempt 1" in logs(), 120)
    moved = _tasks(api, [mover])[mover]
    assert moved["placements"][0]["pool"] == "hpc-nvidia-h100"
    assert "task.migration_requested" in [e["action"] for e in moved["events"]]
    resumed = re.search(r"resumed from attempt 1 at step (\d+)", logs())
    assert resumed and int(resumed.group(1)) > 0, logs()
    assert api.post(f"/tasks/{mover}/cancel").status_code == 200
    _until("the mover cancelled", lambda: _tasks(api, [mover])[mover]["state"] == "cancelled", 90)


def _migrating_queue(api) -> None:
    queue = {"kind": "Queue", "name": "train", "task_types": ["training"], "migration": {"round": "3s", "overhead": "10s", "min_gain": 0.1}}
    policy = {"kind": "SchedulingPolicy", "name": "default", "wait_for_preferred": False}
    assert api.post("/apply", json={"documents": [queue, policy]}).status_code == 200


def test_a_migration_moves_a_checkpointed_ray_job_to_the_faster_node(server) -> None:  # noqa: F811
    """A100 → H100 on the Ray cluster: a raylet with four A100s joins the head (which has four
    H100s as custom resources); the mover starts on the A100 raylet while a blocker holds the
    H100s, and once the blocker is cancelled the move is Ray's job stop (SIGTERM, the task
    checkpoints) and a resume on the head's H100s, from the checkpoint."""
    api = _api(server)
    _until("the Ray pools imported", lambda: api.get("/objects/pools/ray-lab-nvidia-h100").status_code == 200, 30)
    a100_node = f"hetpool-a100-{uuid.uuid4().hex[:6]}"
    added = _ray_sh("add-node", a100_node, json.dumps({"GPU": 4, "accelerator_type:A100-80G": 1, "CPU": 2}))
    assert added.returncode == 0, added.stderr
    mover = blocker = ""
    try:
        a100 = "ray-lab-nvidia-a100-80g"
        synced = lambda: api.post("/clusters/ray-lab/sync").status_code == 200 and api.get(f"/objects/pools/{a100}").status_code == 200  # noqa: E731
        _until("the A100 raylet imported", synced, 60)
        _migrating_queue(api)
        # Runs until the test cancels it, so the mover cannot start on the H100s first.
        blocker = _submit(api, _task("ai-lab/nlp/llm-sft", "ray-lab-nvidia-h100", "gpu", 4, command="sleep 600"), "blocker")
        _until("the blocker running", lambda: _tasks(api, [blocker])[blocker]["state"] == "running", 90)
        spec = _task(
            "ai-lab/nlp/llm-sft", a100, "gpu", 4, checkpoint={"signal": "SIGTERM", "grace": "30s"}, command=STEPPER_FOR.replace("SIGNAL", "TERM")
        )
        spec |= {"any_of": [], "fallback": ["ray-lab-nvidia-h100", a100], "runtime_estimate": "10h"}
        mover = _submit(api, spec, "mover")
        logs = lambda: api.get(f"/tasks/{mover}/logs").json()["text"]  # noqa: E731
        _until("the mover stepping on the A100s", lambda: "started at step 0" in logs(), 90)
        assert _tasks(api, [mover])[mover]["placements"][0]["pool"] == a100
        time.sleep(1)  # some steps done, so a resume from step 0 would show
        assert api.post(f"/tasks/{blocker}/cancel").status_code == 200
        _until("moved and resumed", lambda: _tasks(api, [mover])[mover]["attempt"] == 2 and "resumed from attempt 1" in logs(), 120)
        moved = _tasks(api, [mover])[mover]
        assert moved["placements"][0]["pool"] == "ray-lab-nvidia-h100"
        actions = [e["action"] for e in moved["events"]]
        assert "task.migration_requested" in actions and "task.stop_signalled" in actions, actions
        resumed = re.search(r"resumed from attempt 1 at step (\d+)", logs())
        assert resumed and int(resumed.group(1)) > 0, logs()
    finally:
        for task in (mover, blocker):
            if task:
                api.post(f"/tasks/{task}/cancel")
        for task in (mover, blocker):
            if task:
                _until(f"{task} stopped", lambda task=task: _tasks(api, [task])[task]["state"] in ("cancelled", "succeeded", "failed"), 90)
        _ray_sh("remove-node", a100_node)
