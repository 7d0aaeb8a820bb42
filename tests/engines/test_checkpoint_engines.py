"""Checkpoint-aware preemption on real engines: a real `hetpool up --demo` server with
deploy/slurm.sh's cluster and deploy/ray.sh's head imported. A low-priority task that
declares `checkpoint` fills a pool; a high-priority task preempts it; the engine delivers
the stop signal (Slurm: `scancel --signal=USR1`; Ray: its job stop, SIGTERM), the task
writes its step into HETPOOL_CHECKPOINT_DIR and exits, and its next attempt resumes from
that step (HETPOOL_RESUME=1), not from zero. The local engine: tests/server/test_checkpoint_resume.py.

In the "shared-engines" xdist group (tests/conftest.py): the victim takes a whole pool.
"""

from __future__ import annotations

import re
import time

import pytest

from tests.engines.test_engine_faults import RAY_ADDRESS, SLURM_CONF, _api, _submit, _tasks, _until, server  # noqa: F401 (fixture)
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
    resume on the H100 node, from the checkpoint. (Ray's demo head has one model per device
    class, so it has nothing to move to; its graceful stop and resume are the test above.)"""
    api = _api(server)
    _until("the Slurm pools imported", lambda: api.get("/objects/pools/hpc-nvidia-h100").status_code == 200, 30)
    pools = [p["name"] for p in api.get("/objects/pools").json()]
    a100 = next(p for p in pools if p.startswith("hpc-nvidia-a100"))
    queue = {"kind": "Queue", "name": "train", "task_types": ["training"], "migration": {"round": "3s", "overhead": "10s", "min_gain": 0.1}}
    policy = {"kind": "SchedulingPolicy", "name": "default", "wait_for_preferred": False}
    assert api.post("/apply", json={"documents": [queue, policy]}).status_code == 200
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
