"""The simulator's own behaviour: actual vs estimated runtimes, preemption cost and limits."""

from __future__ import annotations

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.inventory import ClusterSpec, NodeSpec, PoolSpec
from hetpool.core.policy import SchedulingPolicySpec
from hetpool.core.quota import QuotaSpec
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


def _quota_sim(quotas: bool) -> Simulator:
    """One 8-A100 node; org/a and org/b share org's 8 devices, 4 each; b may borrow 2."""
    limits = {"org": (8, None), "team-a": (4, None), "team-b": (4, 2)}
    tenants = {"org": "org", "team-a": "org/a", "team-b": "org/b"}
    specs = [
        QuotaSpec.model_validate(
            {"name": n, "tenant": tenants[n], "limits": [{"resource": "nvidia-a100-80g", "nominal": nom, "borrowing_limit": bl}]}
        )
        for n, (nom, bl) in limits.items()
    ]
    return Simulator(*_estate(), MODELS, CHECK, SimConfig(quotas=specs if quotas else []))


def _team_task(task_id: str, tenant: str, arrival: float, devices: int, hours: float, priority: str = "normal") -> TraceTask:
    doc = {"name": task_id, "tenant": tenant, "type": "training", "priority": priority, "runtime_estimate": f"{hours}h"}
    doc["per_worker"] = {"devices": {"class": "gpu", "count": devices}}
    return TraceTask(task_id, arrival, TaskSpec.model_validate(doc), reference_s=hours * 3600)


def test_quotas_hold_back_borrowers_and_the_lender_reclaims_its_quota() -> None:
    trace = [
        _team_task("b-own", "org/b", 0, 4, 10.0),
        _team_task("b-borrows", "org/b", 60, 2, 10.0),  # 6 of team-b's 4: 2 borrowed from team-a
        _team_task("b-greedy", "org/b", 120, 2, 10.0),  # past the borrowing limit: waits, with 2 devices free
        _team_task("a-reclaims", "org/a", 3600, 4, 1.0, priority="low"),  # within its nominal: takes its 4 back
    ]
    result = _quota_sim(quotas=True).run(trace)
    assert [(a.t, a.task_id, a.borrowing) for a in result.admissions[:4]] == [
        (0, "b-own", False),
        (60, "b-borrows", True),
        (3600, "a-reclaims", False),
        (7200, "b-borrows", True),  # a's task ended: team-a's quota is idle again, b borrows it again
    ]
    outcomes = result.outcomes
    assert outcomes["b-borrows"].preemptions == 1 and outcomes["b-own"].preemptions == 0
    assert outcomes["b-greedy"].start_s == 36000  # only when b-own ends: b is back within 4 + 2
    summary = summarize(result)
    assert summary["borrowed_admissions"] == 2 and summary["waited_over_quota"] >= 1
    # Without quotas the same trace is first come, first served: nobody waits with devices free.
    free_for_all = _quota_sim(quotas=False).run(trace)
    assert [(a.t, a.task_id) for a in free_for_all.admissions[:3]] == [(0, "b-own"), (60, "b-borrows"), (120, "b-greedy")]
    assert summarize(free_for_all)["borrowed_admissions"] == 0


def test_a_lender_that_would_borrow_itself_does_not_reclaim() -> None:
    """Two teams of 4 devices each on one 8-device node, both free to borrow. Team b runs 6
    (2 borrowed from a); team a then asks for 6. Reclaiming b's task would leave a borrowing
    2 from b — and b, a lender again, would reclaim them the next cycle, and so on. A lender
    takes its quota back only for work within its nominal quota: a waits for b's task."""
    limits = {"org": (8, None), "team-a": (4, None), "team-b": (4, None)}
    tenants = {"org": "org", "team-a": "org/a", "team-b": "org/b"}
    specs = [
        QuotaSpec.model_validate(
            {"name": n, "tenant": tenants[n], "limits": [{"resource": "nvidia-a100-80g", "nominal": nom, "borrowing_limit": bl}]}
        )
        for n, (nom, bl) in limits.items()
    ]
    trace = [_team_task("b-wide", "org/b", 0, 6, 10.0), _team_task("a-wide", "org/a", 60, 6, 1.0)]
    result = Simulator(*_estate(), MODELS, CHECK, SimConfig(quotas=specs)).run(trace)
    assert result.outcomes["b-wide"].preemptions == 0 and result.outcomes["a-wide"].preemptions == 0
    assert result.outcomes["a-wide"].start_s == 36000
    # Within its nominal, the same lender does reclaim (4 of its own 4).
    trace = [_team_task("b-wide", "org/b", 0, 6, 10.0), _team_task("a-own", "org/a", 60, 4, 1.0)]
    result = Simulator(*_estate(), MODELS, CHECK, SimConfig(quotas=specs)).run(trace)
    assert result.outcomes["b-wide"].preemptions == 1 and result.outcomes["a-own"].start_s == 60


def test_a_bounded_cycle_with_a_cycle_interval_goes_on_and_ends() -> None:
    """Regression: with carried tasks (a queue longer than max_heads_per_cycle) or
    evictions, the simulator asked for a cycle "now" that the cycle interval then refused,
    and span at that moment forever (appending a sample per turn until memory ran out)."""
    trace = [_task(f"t{i}", 0, 1.0) for i in range(12)] + [_task("low", 0, 6.0, priority="low"), _task("urgent", 1800, 1.0, priority="high")]
    config = SimConfig(policy=SchedulingPolicySpec(max_heads_per_cycle=2), min_cycle_interval_s=60)
    result = Simulator(*_estate(2), MODELS, CHECK, config).run(trace)
    assert summarize(result)["completed"] == 14
    assert result.outcomes["urgent"].start_s is not None and result.outcomes["urgent"].start_s <= 1800 + 60
    assert result.cycles < 3000 and len(result.samples) < 10_000  # bounded: one per turn, turns bounded
