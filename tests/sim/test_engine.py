"""The simulator's own behaviour: actual vs estimated runtimes, preemption cost and limits."""

from __future__ import annotations

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.policy import SchedulingPolicySpec
from hetpool.core.tasks import TaskSpec
from hetpool.sim.engine import SimConfig, Simulator
from hetpool.sim.report import summarize
from hetpool.sim.trace import TraceTask

MODELS = {m.name: m for m in DeviceCatalog.builtin().all()}
CHECK = CompatibilityKB.builtin().check


def _estate(nodes: int = 1):
    names = [f"g{i}" for i in range(nodes)]
    node_specs = [
        NodeSpec.model_validate({"name": n, "cluster": "c", "cpu_cores": 64, "memory_gb": 512, "devices": [{"model": "nvidia-a100-80g", "count": 8}]})
        for n in names
    ]
    return [ClusterSpec(name="c")], node_specs, [PoolSpec(name="a100", cluster="c", model="nvidia-a100-80g", nodes=names, price_per_hour=10.0)]


def _task(task_id: str, arrival: float, hours: float, priority: str = "normal", estimate: str | None = None) -> TraceTask:
    doc = {"name": task_id, "tenant": "org/t", "type": "training", "priority": priority, "per_worker": {"devices": {"class": "gpu", "count": 8}}}
    if estimate:
        doc["runtime_estimate"] = estimate
    return TraceTask(task_id, arrival, TaskSpec.model_validate(doc), reference_s=hours * 3600)


def test_tasks_run_for_their_actual_time_not_the_estimate() -> None:
    result = Simulator(*_estate(), MODELS, CHECK).run([_task("a", 0, 2.0, estimate="10h"), _task("b", 0, 1.0, estimate="10h")])
    summary = summarize(result)
    assert summary["completed"] == 2
    assert summary["makespan_hours"] == 3.0  # 2 h then 1 h on the one node, whatever the estimate said
    assert result.outcomes["b"].wait_s == 2 * 3600
    assert summary["cost"] == round(3 * 8 * 10.0, 2)  # device-hours × price


def test_preemption_restarts_the_victim_and_charges_the_lost_work() -> None:
    trace = [_task("low", 0, 4.0, priority="low"), _task("urgent", 3600, 1.0, priority="high")]
    result = Simulator(*_estate(), MODELS, CHECK).run(trace)
    low, urgent = result.outcomes["low"], result.outcomes["urgent"]
    assert low.preemptions == 1
    assert urgent.start_s == 3600 and urgent.end_s == 2 * 3600
    assert low.end_s == 2 * 3600 + 4 * 3600  # started over from zero after the urgent task
    assert low.cost == round((1 + 4) * 8 * 10.0, 6)  # the lost hour is paid too


def test_a_task_is_not_preempted_more_than_the_policy_allows() -> None:
    trace = [_task("low", 0, 4.0, priority="low")] + [_task(f"hi{i}", 3600 * (1 + 2 * i), 0.5, priority="high") for i in range(4)]
    policy = SchedulingPolicySpec(max_preemptions=1)
    result = Simulator(*_estate(), MODELS, CHECK, SimConfig(policy=policy)).run(trace)
    assert result.outcomes["low"].preemptions == 1
    assert all(result.outcomes[f"hi{i}"].end_s is not None for i in range(4))
    assert summarize(result)["completed"] == 5
