"""The scheduler's pass resolves a queued task's spec once, not on every pass: resolved specs
are kept per task and used again until the task changes state (its `updated_at`) or the
inventory changes (its revision); tasks that leave the queue are forgotten."""

from __future__ import annotations

from fastapi.testclient import TestClient

from hetpool.server.services.context import ServiceContext
from hetpool.server.services.cycle_inputs import resolved_specs
from hetpool.server.workers.scheduler import schedule_once
from tests.server.test_decisions_api import ESTATE, H100, _submit


def test_queued_specs_are_resolved_once_and_again_only_when_something_changed(ctx: ServiceContext, api: TestClient) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    # Three gangs bigger than the estate's free H100s once the first runs: two stay queued.
    ids = [_submit(api, f"gang-{i}", {"class": "gpu", "models": [H100], "count": 8}, workers=2, runtime_estimate="1h") for i in range(3)]
    specs = resolved_specs(ctx)
    schedule_once(ctx)
    first = specs.resolved
    assert first == 3
    states = {i: api.get(f"/api/v1/tasks/{i}").json()["state"] for i in ids}
    queued = [i for i, state in states.items() if state == "queued"]
    assert len(queued) == 2

    schedule_once(ctx)
    assert specs.resolved == first  # nothing changed: nothing resolved again
    assert set(specs.entries) == set(queued)  # the admitted one is forgotten at the next pass

    # An inventory change (a new pool's node) moves the revision: every queued spec is resolved again.
    node = {"kind": "Node", "name": "a1", "cluster": "c1", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": "nvidia-a100-80g", "count": 8}]}
    node["stack"] = ESTATE[4]["stack"]
    assert api.post("/api/v1/apply", json={"documents": [node]}).status_code == 200
    schedule_once(ctx)
    assert specs.resolved == first + 2
