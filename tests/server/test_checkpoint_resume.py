"""Checkpoint-aware preemption end to end on the local engine (real processes): a task that
declares `checkpoint` is sent its signal when a higher-priority task needs its devices,
writes a checkpoint in HETPOOL_CHECKPOINT_DIR, and its next attempt resumes from it
(HETPOOL_RESUME=1) — not from zero — with the time it ran counted as done work.
Slurm and Ray: tests/engines/test_checkpoint_engines.py."""

from __future__ import annotations

import re
import time

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import TaskType
from hetpool.server.db.models import TaskRow
from hetpool.server.services.context import ServiceContext
from tests.server.helpers import drive_until, task_state

A100_TASK = {
    "tenant": "ai-lab/nlp/llm-sft",
    "type": "training",
    "per_worker": {"devices": {"class": "gpu", "models": ["nvidia-a100-80g"], "count": 8}, "cpu": 1, "memory_gb": 1},
}

# Counts steps; on its stop signal writes the step it reached and exits; a resumed attempt
# starts from the step in its checkpoint. The checkpoint is written only on the signal, so
# a resumed step above 0 proves the signal arrived and the directory outlived the attempt.
STEPPER_FOR = """
step=0
if [ "${HETPOOL_RESUME:-}" = 1 ]; then
  step=$(cat "$HETPOOL_CHECKPOINT_DIR/step")
  echo "resumed from attempt $HETPOOL_RESUME_FROM_ATTEMPT at step $step"
fi
trap 'echo "$step" > "$HETPOOL_CHECKPOINT_DIR/step"; echo "checkpointed at step $step"; exit 0' SIGNAL
echo "started at step $step"
while [ "$step" -lt 100000 ]; do step=$((step + 1)); sleep 0.05; done
echo "finished at step $step"
"""
STEPPER = STEPPER_FOR.replace("SIGNAL", "USR1")


def _submit(api: TestClient, **fields) -> str:
    response = api.post("/api/v1/tasks", json=fields)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _task(api: TestClient, task_id: str) -> dict:
    return api.get(f"/api/v1/tasks/{task_id}").json()


def _log(api: TestClient, task_id: str) -> str:
    return api.get(f"/api/v1/tasks/{task_id}/logs").json()["text"]


def test_a_preempted_checkpointable_task_is_signalled_and_resumes_from_its_checkpoint(ctx: ServiceContext, demo: TestClient) -> None:
    checkpoint = {"signal": "SIGUSR1", "grace": "20s"}
    low = _submit(demo, **A100_TASK, name="ckpt-sweep", workers=2, priority="low", runtime_estimate="2h", checkpoint=checkpoint, command=STEPPER)
    # "running" means the processes were started, not that the shell reached its trap: a signal
    # before that kills it with nothing written (seen on a loaded CI machine). Wait for its first line.
    drive_until(ctx, lambda: task_state(demo, low) == "running" and "started at step 0" in _log(demo, low), 30)
    ctx.clock.advance(600)  # it has run ten minutes (the test clock moves only when told)
    high = _submit(demo, **A100_TASK, name="urgent", priority="high", command="echo urgent-done")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=60)
    victim = _task(demo, low)
    actions = [e["action"] for e in victim["events"]]
    assert "task.stop_signalled" in actions and "task.preempted" in actions, actions
    signalled = next(e for e in victim["events"] if e["action"] == "task.stop_signalled")
    assert signalled["after"]["signal"] == "SIGUSR1" and signalled["after"]["grace_s"] == 20
    # Ten minutes on an A100, in seconds on the reference device.
    a100 = DeviceCatalog.builtin().get("nvidia-a100-80g").perf_for(TaskType.TRAINING)
    assert victim["checkpoint"]["resume_from"] == 1 and victim["checkpoint"]["progress_s"] == pytest.approx(600 * a100)
    assert "resumes from attempt 1's checkpoint" in victim["message"]
    # Attempt 2 resumes from what attempt 1 wrote when it was signalled.
    drive_until(ctx, lambda: _task(demo, low)["attempt"] == 2 and "resumed from attempt 1" in _log(demo, low), timeout_s=60)
    resumed = re.search(r"resumed from attempt 1 at step (\d+)", _log(demo, low))
    assert resumed and int(resumed.group(1)) > 0, _log(demo, low)
    with ctx.db.transaction() as session:
        row = session.execute(select(TaskRow).where(TaskRow.id == low)).scalar_one()
        assert row.stop_signalled_at is None and row.resume_from == 1
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled", 30)


def test_a_task_that_ignores_its_signal_is_killed_after_the_grace(ctx: ServiceContext, demo: TestClient) -> None:
    stubborn = "trap '' USR1; echo started; while :; do sleep 0.1; done"
    low = _submit(demo, **A100_TASK, name="stubborn", workers=2, priority="low", checkpoint={"signal": "USR1", "grace": "2s"}, command=stubborn)
    drive_until(ctx, lambda: task_state(demo, low) == "running", 30)
    high = _submit(demo, **A100_TASK, name="urgent", priority="high", command="echo urgent-done")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=60)
    events = _task(demo, low)["events"]
    actions = [e["action"] for e in events]
    assert actions.index("task.stop_signalled") < actions.index("task.preempted")
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) in ("cancelled",), 30)


def test_the_server_cuts_a_long_grace_so_a_member_cannot_stall_a_preemptor(ctx: ServiceContext, demo: TestClient) -> None:
    """A member may declare an hour's grace and ignore the signal; the server's
    max_checkpoint_grace_s (here 2 s) is what the preemptor waits at most."""
    ctx.settings.max_checkpoint_grace_s = 2.0
    stubborn = "trap '' TERM; echo started; while :; do sleep 0.1; done"
    low = _submit(demo, **A100_TASK, name="stubborn", workers=2, priority="low", checkpoint={"grace": "1h"}, command=stubborn)
    drive_until(ctx, lambda: task_state(demo, low) == "running", 30)
    assert _task(demo, low)["checkpoint"]["grace_s"] == 2.0
    high = _submit(demo, **A100_TASK, name="urgent", priority="high", command="echo urgent-done")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=60)
    signalled = [e for e in _task(demo, low)["events"] if e["action"] == "task.stop_signalled"]
    assert signalled and signalled[0]["after"]["grace_s"] == 2.0
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled", 30)


def test_a_task_without_checkpoint_is_stopped_at_once_and_starts_afresh(ctx: ServiceContext, demo: TestClient) -> None:
    low = _submit(demo, **A100_TASK, name="plain", workers=2, priority="low", command='echo "resume=${HETPOOL_RESUME:-no}"; sleep 60')
    drive_until(ctx, lambda: task_state(demo, low) == "running", 30)
    high = _submit(demo, **A100_TASK, name="urgent", priority="high", command="echo urgent-done")
    drive_until(ctx, lambda: task_state(demo, high) == "succeeded", timeout_s=60)
    victim = _task(demo, low)
    assert "task.stop_signalled" not in [e["action"] for e in victim["events"]] and "checkpoint" not in victim
    drive_until(ctx, lambda: _task(demo, low)["attempt"] == 2 and "resume=" in _log(demo, low), timeout_s=60)
    assert "resume=no" in _log(demo, low)
    demo.post(f"/api/v1/tasks/{low}/cancel")
    drive_until(ctx, lambda: task_state(demo, low) == "cancelled", 30)


def test_checkpoint_fields_are_validated_with_the_field_named(demo: TestClient) -> None:
    for bad, field in ([{"signal": "SIGKILL"}, "signal"], [{"grace": "2h"}, "grace"], [{"grace": 0}, "grace"], [{"resume": "maybe"}, "resume"]):
        response = demo.post("/api/v1/tasks", json={**A100_TASK, "name": "bad", "checkpoint": bad, "command": "true"})
        assert response.status_code == 422, response.text
        assert f"checkpoint.{field}" in response.text or f"'checkpoint', '{field}'" in response.text or field in response.text, response.text


def test_a_migration_rule_moves_a_checkpointed_task_to_the_faster_pool_once_it_is_free(ctx: ServiceContext, demo: TestClient) -> None:
    """The move is costed with the grace the server applies: the mover declares an hour, which
    would make a 90-minute task's move (A100 → H800, 2.71× faster) not worth it; cut to 30 s
    (max_checkpoint_grace_s) it saves ~50 min."""
    ctx.settings.max_checkpoint_grace_s = 30.0
    queue = {"kind": "Queue", "name": "train", "task_types": ["training"], "migration": {"round": "6m", "overhead": "60s", "min_gain": 0.1}}
    policy = {"kind": "SchedulingPolicy", "name": "default", "wait_for_preferred": False}
    assert demo.post("/api/v1/apply", json={"documents": [queue, policy]}).status_code == 200
    eight = {"devices": {"class": "gpu", "count": 8}, "cpu": 1, "memory_gb": 1}
    # The blocker holds the H800s until the test cancels it (a fixed sleep could end before the
    # mover is placed on a loaded machine, and the mover would start on the H800s).
    blocker = _submit(demo, name="blocker", tenant="ai-lab/nlp/llm-sft", type="training", per_worker=eight, fallback=["bj-h800"], command="sleep 600")
    drive_until(ctx, lambda: task_state(demo, blocker) == "running", 30)
    mover = _submit(
        demo,
        name="mover",
        tenant="ai-lab/nlp/llm-sft",
        type="training",
        per_worker=eight,
        fallback=["nvidia-h800", "nvidia-a100-80g"],
        runtime_estimate="90m",
        checkpoint={"signal": "SIGUSR1", "grace": "1h"},
        command=STEPPER,
    )
    drive_until(ctx, lambda: task_state(demo, mover) == "running" and "started at step 0" in _log(demo, mover), 30)
    time.sleep(1)  # some steps done, so a resume from step 0 would show
    assert _task(demo, mover)["placements"][0]["model"] == "nvidia-a100-80g"  # the H800s are taken
    demo.post(f"/api/v1/tasks/{blocker}/cancel")
    drive_until(ctx, lambda: task_state(demo, blocker) == "cancelled", 30)
    ctx.clock.advance(400)  # the next migration round
    drive_until(ctx, lambda: _task(demo, mover)["attempt"] == 2 and "resumed from attempt 1" in _log(demo, mover), timeout_s=60)
    moved = _task(demo, mover)
    assert moved["placements"][0]["model"] == "nvidia-h800" and moved["checkpoint"]["resume_from"] == 1
    actions = [e["action"] for e in moved["events"]]
    assert "task.migration_requested" in actions and "task.stop_signalled" in actions
    requested = next(e for e in moved["events"] if e["action"] == "task.migration_requested")["after"]
    assert (requested["from_model"], requested["to_model"]) == ("nvidia-a100-80g", "nvidia-h800")
    # ~5,000 s left: 5,000 − 5,000/2.71 − 60 s overhead − 30 s grace ≈ 3,060 s (with the 1 h grace: < 0)
    assert 2400 < requested["gain_s"] < 3400, requested
    resumed = re.search(r"resumed from attempt 1 at step (\d+)", _log(demo, mover))
    assert resumed and int(resumed.group(1)) > 0
    with ctx.db.transaction() as session:
        assert session.execute(select(TaskRow.preemptions).where(TaskRow.id == mover)).scalar_one() == 0  # a move is not a preemption
    demo.post(f"/api/v1/tasks/{mover}/cancel")
    drive_until(ctx, lambda: task_state(demo, mover) == "cancelled", 30)


def test_a_template_may_declare_the_checkpoint_for_its_tasks(demo: TestClient) -> None:
    template = {"kind": "TaskTemplate", "name": "ckpt-train", "type": "training", "defaults": {"checkpoint": {"signal": "SIGUSR1", "grace": "5m"}}}
    assert demo.post("/api/v1/apply", json={"documents": [template]}).status_code == 200
    inherited = _submit(demo, **A100_TASK, name="from-template", template="ckpt-train", command="true")
    assert _task(demo, inherited)["checkpoint"] == {
        "signal": "SIGUSR1",
        "grace_s": 300.0,
        "resume": True,
        "resume_from": None,
        "progress_s": 0.0,
        "stop_signalled_at": None,
    }
    own = _submit(
        demo, **A100_TASK, name="own", template="ckpt-train", checkpoint={"signal": "SIGTERM", "grace": "10s", "resume": False}, command="true"
    )
    assert _task(demo, own)["checkpoint"]["signal"] == "SIGTERM" and _task(demo, own)["checkpoint"]["resume"] is False
