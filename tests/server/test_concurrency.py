"""Two replicas (two ServiceContexts and apps on one database), 50 client threads submitting
against one Quota while both replicas run the scheduler in loops: the devices admitted never
exceed the quota, and no device is handed out twice (the scheduler epoch compare-and-set in
workers/scheduler.py; this holds without leader election)."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

from fastapi.testclient import TestClient
from sqlalchemy import select

from hetpool.core.clock import FixedClock
from hetpool.core.states import TaskState
from hetpool.engines.local import LocalBackend
from hetpool.server.app import create_app
from hetpool.server.db.models import PlacementRow, TaskRow
from hetpool.server.db.session import Database
from hetpool.server.services.context import ServiceContext
from hetpool.server.workers.scheduler import schedule_once

QUOTA = 6
CLIENTS = 50
CUDA = {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}}
ESTATE = [
    {"kind": "Tenant", "name": "org"},
    {"kind": "Cluster", "name": "c1"},
    *(
        {
            "kind": "Node",
            "name": f"g{i}",
            "cluster": "c1",
            "cpu_cores": 64,
            "memory_gb": 512,
            "devices": [{"model": "nvidia-a100-80g", "count": 8}],
            "stack": CUDA,
        }
        for i in range(4)
    ),
    {"kind": "Pool", "name": "a100", "cluster": "c1", "model": "nvidia-a100-80g", "nodes": [f"g{i}" for i in range(4)]},
    {"kind": "Quota", "name": "org", "tenant": "org", "limits": [{"resource": "nvidia-a100-80g", "nominal": QUOTA}]},
]


def admitted(ctx: ServiceContext) -> tuple[int, Counter]:
    """Devices held by admitted tasks, and how often each device is held."""
    with ctx.db.transaction() as session:
        rows = session.execute(
            select(PlacementRow)
            .join(TaskRow, (PlacementRow.task_id == TaskRow.id) & (PlacementRow.attempt == TaskRow.attempt))
            .where(TaskRow.state == TaskState.ADMITTED.value)
        ).scalars()
        held = Counter((p.node, i) for p in rows for i in p.device_indices)
    return sum(held.values()), held


def test_two_replicas_and_fifty_clients_never_admit_more_than_the_quota(ctx: ServiceContext, api: TestClient, admin_token: str) -> None:
    assert api.post("/api/v1/apply", json={"documents": ESTATE}).status_code == 200
    db2 = Database(ctx.db.url)
    other = ServiceContext(settings=ctx.settings, db=db2, clock=FixedClock(), backends={"local": LocalBackend(ctx.settings.backend_dir / "local")})
    replicas = [ctx, other]
    stop, peaks, errors, ids = threading.Event(), [], [], []
    try:
        with TestClient(create_app(ctx=other), headers={"Authorization": f"Bearer {admin_token}"}) as api2:
            clients = [api, api2]

            def submitter(n: int) -> None:
                rng = random.Random(n)
                try:
                    for j in range(2):
                        # Mixed priorities: a later cycle would pick other tasks than an earlier one.
                        body = {"name": f"c{n}-{j}", "tenant": "org", "type": "training", "image": "img", "command": "sleep 60"}
                        body |= {"priority": rng.choice(["low", "normal", "high"]), "preemptible": False}
                        body["per_worker"] = {"devices": {"class": "gpu", "count": rng.choice([1, 2])}, "cpu": 1, "memory_gb": 1}
                        response = clients[n % 2].post("/api/v1/tasks", json=body)
                        assert response.status_code == 201, response.text
                        ids.append(response.json()["id"])
                except Exception as exc:  # collected: a thread's exception would otherwise vanish
                    errors.append(exc)

            def scheduler(replica: ServiceContext) -> None:
                try:
                    while not stop.is_set():
                        schedule_once(replica)
                        peaks.append(admitted(replica)[0])
                except Exception as exc:
                    errors.append(exc)

            loops = [threading.Thread(target=scheduler, args=(r,)) for r in replicas]
            subs = [threading.Thread(target=submitter, args=(n,)) for n in range(CLIENTS)]
            for t in loops + subs:
                t.start()
            for t in subs:
                t.join(60)
            # Both keep scheduling a while after the last submit; the quota must end up full.
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and admitted(ctx)[0] < QUOTA - 1:
                time.sleep(0.05)
            stop.set()
            for t in loops:
                t.join(60)
    finally:
        stop.set()
        db2.dispose()
    assert not errors, errors[:3]
    assert len(ids) == 2 * CLIENTS == len(set(ids))
    used, held = admitted(ctx)
    assert max(peaks) <= QUOTA and used <= QUOTA, (max(peaks), used)
    assert used >= QUOTA - 1  # 1- and 2-device tasks: the last device may stay free
    assert all(count == 1 for count in held.values()), held
