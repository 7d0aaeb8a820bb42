"""What a pending task is told, through run_cycle (issue 16): the reason code and its facts,
the one rendered sentence, and an estimated start consistent with its reservation.

Scenarios that were wrong before: a task held back by another task's reservation was
"preempting 0 lower-priority task(s)" (`preempting: []`) and the head holding the
reservation had `estimated_start: null`; a task asking for more than its quota could ever
give waited "for capacity" with a reservation and an ETA.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.policy import QueueSpec, SchedulingPolicySpec
from hetpool.core.specs import parse_spec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.cycle import CycleResult, Decision, QueuedTask, run_cycle
from hetpool.scheduling.explain import (
    ETA_BEYOND_HORIZON,
    ETA_FORECAST,
    ETA_NONE,
    ETA_RESERVATION,
    OTHER_TENANTS_TASK_TEXT,
    Explanation,
    Reason,
    for_tenant,
)
from hetpool.scheduling.quota_view import Held
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=T0 + timedelta(minutes=minutes))


def _by_id(result: CycleResult) -> dict[str, Decision]:
    return {d.task_id: d for d in result.decisions}


def _reservation_estate():
    """g0, g1 (h100) half used by work that may not be preempted, until +2h / +3h; g2 (h100)
    fully used by low-priority preemptible work until +10h."""
    running = [
        running_task("r0", [alloc("g0", "h100", range(4))], priority="low", expected_end=T0 + timedelta(hours=2), preemptible=False),
        running_task("r1", [alloc("g1", "h100", range(4))], priority="low", expected_end=T0 + timedelta(hours=3), preemptible=False),
        running_task("r2", [alloc("g2", "h100", range(8))], priority="low", expected_end=T0 + timedelta(hours=10)),
    ]
    nodes = [node(n, H100, 8, stack=CUDA_STACK) for n in ("g0", "g1", "g2")]
    return snapshot_with_running(nodes, [pool("h100", H100, ["g0", "g1", "g2"])], running), running


def _gang(**fields) -> QueuedTask:
    return _q("gang", 0, workers=2, devices={"class": "gpu", "count": 8, "models": [H100]}, **fields)


def _small() -> QueuedTask:
    # No runtime estimate: it may not backfill onto the gang's reserved nodes.
    return _q("small", 5, devices={"class": "gpu", "count": 1, "models": [H100]})


# ------------------------------------------------------------------ item 3: blocked by a reservation


def test_a_task_held_back_by_a_reservation_is_blocked_not_preempting() -> None:
    snap, running = _reservation_estate()
    decisions = _by_id(run_cycle(snap, [_gang(), _small()], CHECK, T0, running=running))
    small = decisions["small"]
    assert not small.admit and small.victims == []
    assert small.explanation.reason == Reason.BLOCKED_BY_RESERVATION
    stored = small.explanation.to_dict()
    assert "preempting" not in stored
    start = (T0 + timedelta(hours=3)).isoformat()
    assert stored["blocking_task"] == "gang" and stored["start_at"] == start
    assert stored["summary"].startswith(f"held back by the reservation of gang (starts {start}): starting now would delay it")


def test_the_head_holding_a_reservation_has_an_estimated_start() -> None:
    snap, running = _reservation_estate()
    gang = _by_id(run_cycle(snap, [_gang(), _small()], CHECK, T0, running=running))["gang"].explanation.to_dict()
    assert gang["reason"] == Reason.HOLDS_RESERVATION
    assert gang["reservation"] == {"nodes": ["g0", "g1"], "start_at": (T0 + timedelta(hours=3)).isoformat()}
    # The small task does not start in the forecast before the reservation it is blocked by.
    assert gang["estimated_start"] == gang["reservation"]["start_at"]
    assert gang["eta_basis"] in (ETA_FORECAST, ETA_RESERVATION)
    assert gang["summary"].startswith("waiting for capacity, holding a reservation on 2 node(s) from ")


def test_a_blocked_task_is_estimated_after_the_reservation_it_waits_for() -> None:
    snap, running = _reservation_estate()
    decisions = _by_id(run_cycle(snap, [_gang(runtime_estimate="1h"), _small()], CHECK, T0, running=running))
    gang, small = decisions["gang"].explanation.facts, decisions["small"].explanation.facts
    assert small["eta_basis"] == ETA_FORECAST
    assert datetime.fromisoformat(small["estimated_start"]) > datetime.fromisoformat(gang["estimated_start"])


def test_a_blocked_task_is_not_forecast_onto_the_nodes_its_blocker_will_hold() -> None:
    # The gang (no runtime estimate) takes g0 and g1 at +3h for good: the small task's
    # start is when g2 frees (+10h), not "now" on the nodes held for the gang.
    snap, running = _reservation_estate()
    small = _by_id(run_cycle(snap, [_gang(), _small()], CHECK, T0, running=running))["small"].explanation.facts
    assert (small["estimated_start"], small["eta_basis"]) == ((T0 + timedelta(hours=10)).isoformat(), ETA_FORECAST)


def test_a_task_with_no_start_in_the_forecast_says_so() -> None:
    nodes = [node("g0", H100, 8, stack=CUDA_STACK)]
    running = [running_task("r", [alloc("g0", "h100", range(8))], expected_end=None, preemptible=False)]
    snap = snapshot_with_running(nodes, [pool("h100", H100, ["g0"])], running)
    expl = run_cycle(snap, [_q("w", 0, devices={"class": "gpu", "count": 8})], CHECK, T0, running=running).decisions[0].explanation
    assert expl.facts["eta_basis"] == ETA_BEYOND_HORIZON and expl.facts["estimated_start"] is None
    assert expl.summary.endswith("; no start within the forecast horizon (200 queued tasks, running work with a known end)")


def test_the_reserved_start_is_the_promise_when_the_forecast_has_none() -> None:
    # Only the first task in hand-out order is forecast (horizon 1); the gang, second, holds
    # a reservation in its own queue: its reserved start is what it is told.
    snap, running = _reservation_estate()
    queues = [_queue("a", order=1), _queue("gangs", order=2)]
    first = _q("first", 0, queue="a", priority="high", devices={"class": "gpu", "count": 8, "models": [H100]})
    policy = SchedulingPolicySpec(estimate_horizon=1)
    decisions = _by_id(run_cycle(snap, [first, _gang(queue="gangs")], CHECK, T0, running=running, queues=queues, policy=policy))
    gang = decisions["gang"].explanation.facts
    assert decisions["gang"].explanation.reason == Reason.HOLDS_RESERVATION
    assert gang["position"] == 2
    assert gang["estimated_start"] == gang["reservation"]["start_at"] == (T0 + timedelta(hours=3)).isoformat()
    assert gang["eta_basis"] == ETA_RESERVATION


def _queue(name: str, **fields) -> QueueSpec:
    return QueueSpec.model_validate({"kind": "Queue", "name": name, **fields})


# ------------------------------------------------------------------ item 2: a request above its quota's ceiling

MODELS = {m.name: m for m in DeviceCatalog.builtin()}


def _book(nominal: float, borrowing_limit: float | None = None, sibling: float | None = None) -> QuotaBook:
    limit = {"resource": H100, "nominal": nominal} | ({"borrowing_limit": borrowing_limit} if borrowing_limit is not None else {})
    quotas = [parse_spec({"kind": "Quota", "name": "team", "tenant": "ai-lab/nlp", "limits": [limit]})]
    if sibling is not None:
        quotas.append(parse_spec({"kind": "Quota", "name": "other", "tenant": "ai-lab/cv", "limits": [{"resource": H100, "nominal": sibling}]}))
    return QuotaBook(quotas, MODELS, {"h100": H100})


def test_a_task_above_its_quota_ceiling_waits_with_exceeds_quota_and_no_eta_or_reservation() -> None:
    snap, running = _reservation_estate()
    result = run_cycle(snap, [_gang()], CHECK, T0, running=running, quota=_book(4, borrowing_limit=2, sibling=8))
    decision = result.decisions[0]
    assert not decision.admit and decision.victims == []
    assert result.reservations == []
    stored = decision.explanation.to_dict()
    assert stored["reason"] == Reason.EXCEEDS_QUOTA
    assert (stored["quota"], stored["resource"], stored["requested"], stored["nominal"], stored["borrowable"]) == ("team", H100, 16, 4, 2)
    assert stored["summary"] == f"exceeds quota team even with borrowing: {H100} 16 > 4 nominal + 2 borrowable"
    assert stored["eta_basis"] == ETA_NONE and stored["estimated_start"] is None and "position" not in stored
    assert "reservation" not in stored


def test_a_task_above_its_quota_ceiling_never_preempts() -> None:
    snap, running = _reservation_estate()
    queue = [_q("urgent", 0, priority="critical", devices={"class": "gpu", "count": 8, "models": [H100]})]
    decision = run_cycle(snap, queue, CHECK, T0, running=running, quota=_book(4)).decisions[0]
    assert decision.explanation.reason == Reason.EXCEEDS_QUOTA and decision.victims == []


def test_exceeds_quota_on_idle_capacity_is_not_over_quota() -> None:
    nodes = [node("g0", H100, 8, stack=CUDA_STACK)]
    snap = snapshot_with_running(nodes, [pool("h100", H100, ["g0"])])
    task_8 = _q("big", 0, devices={"class": "gpu", "count": 8, "models": [H100]})
    # 8 > 4 nominal and nothing to borrow: never admitted as it stands.
    assert run_cycle(snap, [task_8], CHECK, T0, quota=_book(4)).decisions[0].explanation.reason == Reason.EXCEEDS_QUOTA
    # 8 <= 4 nominal + 4 a sibling could lend: over quota only while the sibling uses its own.
    book = _book(4, sibling=4)
    book.charge("sibling-work", ("ai-lab/cv", "dev", "training"), [_held(4)])
    over = run_cycle(snap, [task_8], CHECK, T0, quota=book).decisions[0]
    assert over.explanation.reason == Reason.OVER_QUOTA
    assert over.explanation.summary.startswith("over quota: quota team: nvidia-h100 would be 8 of 4")


def test_an_approved_over_quota_task_is_not_held_by_the_ceiling() -> None:
    nodes = [node("g0", H100, 8, stack=CUDA_STACK)]
    snap = snapshot_with_running(nodes, [pool("h100", H100, ["g0"])])
    exempt = QueuedTask("big", task("big", devices={"class": "gpu", "count": 8, "models": [H100]}), T0, quota_exempt=True)
    assert run_cycle(snap, [exempt], CHECK, T0, quota=_book(4)).decisions[0].admit


def _held(devices: float) -> Held:
    return Held("h100", H100, devices, 1, 1)


# ------------------------------------------------------------------ set aside, FIFO, the stored form


def test_every_decision_carries_a_typed_explanation_that_round_trips() -> None:
    snap, running = _reservation_estate()
    for decision in run_cycle(snap, [_gang(), _small()], CHECK, T0, running=running).decisions:
        assert isinstance(decision.explanation, Explanation)
        stored = decision.explanation.to_dict()
        assert Explanation.from_dict(stored).to_dict() == stored


def test_for_tenant_leaves_out_other_tenants_task_ids() -> None:
    blocked = Explanation(Reason.BLOCKED_BY_RESERVATION, facts={"blocking_task": "t-theirs", "start_at": "2026-01-01T00:00:00+00:00"})
    tenants = {"t-theirs": "org/a", "t-mine": "org/b"}
    assert for_tenant(blocked, "org/b", tenants).facts["blocking_task"] == OTHER_TENANTS_TASK_TEXT
    assert for_tenant(blocked, "org/a", tenants).facts["blocking_task"] == "t-theirs"
    assert blocked.facts["blocking_task"] == "t-theirs"  # the cycle's own record is untouched
    preempting = Explanation(Reason.PREEMPTING, facts={"victim_count": 2, "victim_kind": "x", "preempting": ["t-theirs", "t-mine"]})
    shown = for_tenant(preempting, "org/b", tenants)
    assert shown.facts["preempting"] == ["t-mine"] and shown.facts["victim_count"] == 2
    assert for_tenant(preempting, "org/b", {}).facts["preempting"] == []  # unknown ids count as foreign
