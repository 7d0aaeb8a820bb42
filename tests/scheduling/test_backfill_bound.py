"""The backfill bound: work that got ahead of a waiting head on the strength of its runtime
estimate, and then overran that estimate, gives way to the head — run_cycle with the real
catalog and compatibility KB."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.policy import ClassRule, SchedulingPolicySpec
from hetpool.core.specs import parse_spec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.cycle_preempt import OVERRUN_PREFIX
from hetpool.scheduling.explain import VICTIMS_OVERRUN_TEXT
from hetpool.scheduling.quota_view import Held
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"


def _head() -> QueuedTask:
    """A two-node gang queued at T0."""
    spec = task("head", workers=2, devices={"class": "gpu", "count": 8}, runtime_estimate="4h")
    return QueuedTask(id="head", spec=spec, queued_at=T0)


def _cycle(
    now: datetime,
    *,
    started_min: float = 5,
    priority: str = "normal",
    policy: SchedulingPolicySpec | None = None,
    quota=None,
    tenant: str = "ai-lab/nlp/p",
):
    """g1 is free again; g0 runs `late`, which started `started_min` after the head queued
    with a 50-minute estimate (it backfilled ahead of the head) and still runs at `now`."""
    started = T0 + timedelta(minutes=started_min)
    late = running_task("late", [alloc("g0", "h100", range(8))], priority=priority, started_at=started, expected_end=started + timedelta(minutes=50))
    snap = snapshot_with_running([node(n, H100, 8, stack=CUDA_STACK) for n in ("g0", "g1")], [pool("h100", H100, ["g0", "g1"])], [late])
    options = {"policy": policy} if policy else {}
    if quota is not None:
        options["quota"] = quota
    return run_cycle(snap, [_head()], CHECK, now, running=[late], **options)


def _head_decision(result):
    return next(d for d in result.decisions if d.task_id == "head")


def test_work_that_overran_its_estimate_gives_way_to_the_head_it_delays() -> None:
    # Estimated to end at T0+55m; at T0+61m it has overrun by 6 min > max(5 min, 10 % of 50 min).
    decision = _head_decision(_cycle(T0 + timedelta(minutes=61)))
    assert decision.victims == ["late"]
    assert decision.preemption_reason.startswith(OVERRUN_PREFIX) and "head" in decision.preemption_reason
    facts = decision.explanation.to_dict()
    assert facts["reason"] == "preempting" and facts["victim_kind"] == VICTIMS_OVERRUN_TEXT


def test_within_its_allowance_it_keeps_running() -> None:
    decision = _head_decision(_cycle(T0 + timedelta(minutes=58)))  # 3 min over
    assert decision.victims == [] and not decision.admit


def test_work_that_started_before_the_head_queued_is_not_held_to_it() -> None:
    decision = _head_decision(_cycle(T0 + timedelta(minutes=50), started_min=-20))  # due at T0+30m
    assert decision.victims == []


def test_higher_priority_work_is_not_held_to_it() -> None:
    decision = _head_decision(_cycle(T0 + timedelta(minutes=61), priority="high"))
    assert decision.victims == []


def test_the_bound_holds_with_preemption_off_and_can_be_switched_off() -> None:
    no_preemption = SchedulingPolicySpec(classes={"gpu": ClassRule(preemption=False)})
    assert _head_decision(_cycle(T0 + timedelta(minutes=61), policy=no_preemption)).victims == ["late"]
    off = SchedulingPolicySpec(evict_overrunning_backfill=False)
    assert _head_decision(_cycle(T0 + timedelta(minutes=61), policy=off)).victims == []


@pytest.mark.parametrize(("late_tenant", "victims"), [("ai-lab/nlp/p", ["late"]), ("ai-lab/cv/p", [])])
def test_a_borrowing_head_does_not_take_another_tenants_guaranteed_quota(late_tenant: str, victims: list[str]) -> None:
    """The head needs 16 GPUs on a quota of 8 and borrows its sibling's 8: work of its own
    tenant gives way, the sibling's work within its own quota does not (as for any preemption)."""

    def quota(name: str, tenant: str) -> object:
        return parse_spec({"kind": "Quota", "name": name, "tenant": tenant, "limits": [{"resource": "gpu", "nominal": 8}]})

    book = QuotaBook([quota("nlp", "ai-lab/nlp"), quota("cv", "ai-lab/cv")], {m.name: m for m in DeviceCatalog.builtin()}, {"h100": H100})
    book.charge("late", (late_tenant, "dev", "training"), [Held("h100", H100, 8, 1, 1)])
    assert _head_decision(_cycle(T0 + timedelta(minutes=61), quota=book, tenant=late_tenant)).victims == victims


@pytest.mark.parametrize("preemptible", [True, False])
def test_only_preemptible_work_backfills_onto_reserved_nodes(preemptible: bool) -> None:
    """The bound needs the work to be evictable: work that may not be evicted never runs
    ahead of a head on its reserved nodes."""
    hold = running_task("hold", [alloc("g1", "h100", range(8))], expected_end=T0 + timedelta(hours=2))
    snap = snapshot_with_running([node(n, H100, 8, stack=CUDA_STACK) for n in ("g0", "g1")], [pool("h100", H100, ["g0", "g1"])], [hold])
    short = task("short", devices={"class": "gpu", "count": 8}, runtime_estimate="30m", preemptible=preemptible)
    queue = [_head(), QueuedTask(id="short", spec=short, queued_at=T0 + timedelta(minutes=1))]
    result = run_cycle(snap, queue, CHECK, T0 + timedelta(minutes=2), running=[hold])
    assert next(d for d in result.decisions if d.task_id == "short").admit is preemptible
