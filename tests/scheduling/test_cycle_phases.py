"""Each phase of the cycle on its own (scheduling/cycle.py): open → nominate → gate → fit
→ admit → plan preemption → reserve or block → requeue, over a CycleInputs / CycleState
built the way _run_cycle builds them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.policy import ClassRule, QueueSpec, SchedulingPolicySpec
from hetpool.core.specs import parse_spec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling import cycle
from hetpool.scheduling.cycle import QueuedTask
from hetpool.scheduling.cycle_preempt import plan_preemption
from hetpool.scheduling.cycle_state import Blame, CycleInputs
from hetpool.scheduling.explain import ETA_FORECAST, ETA_NONE, Reason
from hetpool.scheduling.filters import memoized
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, node, pool, running_task, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"
DEFAULT = QueueSpec.model_validate({"kind": "Queue", "name": "default"})


def _q(task_id: str, minutes: float = 0, **fields) -> QueuedTask:
    return QueuedTask(id=task_id, spec=task(task_id, **fields), queued_at=T0 + timedelta(minutes=minutes))


def _gpus(count: int = 8, **extra) -> dict:
    return {"class": "gpu", "count": count, "models": [H100], **extra}


def _setup(running=(), queue=(), nodes=("g0", "g1"), policy=None, quota=None, queues=()):
    snap = snapshot_with_running([node(n, H100, 8, stack=CUDA_STACK) for n in nodes], [pool("h100", H100, list(nodes))], running)
    models = {p.model.name: p.model for p in snap.pools}
    cx = CycleInputs(snap, memoized(CHECK, snap.compat_cache), T0, policy or SchedulingPolicySpec(), models, list(running), quota, Blame())
    return cx, cycle.open_cycle(cx, list(queue), list(queues), {})


def _book(nominal: float) -> QuotaBook:
    q = parse_spec({"kind": "Quota", "name": "team", "tenant": "ai-lab", "limits": [{"resource": H100, "nominal": nominal}]})
    return QuotaBook([q], {m.name: m for m in DeviceCatalog.builtin()}, {"h100": H100})


# ------------------------------------------------------------------ open / heads


def test_open_hands_out_heads_by_priority_then_age() -> None:
    queue = [_q("old", 0, devices=_gpus(1)), _q("urgent", 9, priority="high", devices=_gpus(1)), _q("new", 5, devices=_gpus(1))]
    _, st = _setup(queue=queue)
    assert [item.id for _, item in cycle.heads(st, Blame())] == ["urgent", "old", "new"]


# ------------------------------------------------------------------ nominate


def test_nominate_keeps_a_task_off_reserved_nodes_it_must_not_delay() -> None:
    running = [running_task("r", [alloc("g0", "h100", range(4))], preemptible=False, expected_end=T0 + timedelta(hours=1))]
    cx, st = _setup(running)
    gang = _q("gang", 0, workers=2, devices=_gpus(8))
    cycle.leave_waiting(cx, st, cycle.nominate(cx, st, DEFAULT, gang), cycle.fit(cx, st, cycle.nominate(cx, st, DEFAULT, gang)))
    cand = cycle.nominate(cx, st, DEFAULT, _q("small", 1, devices=_gpus(1)))
    assert [r.task_id for r in cand.blocking] == ["gang"]
    assert cand.shape.endswith("|gang")
    np.testing.assert_array_equal(cand.target_kwargs["reserved_nodes"], [True, True])
    assert "reserved_nodes" not in cand.kwargs


# ------------------------------------------------------------------ gate


def test_gate_stops_a_task_above_its_quota_ceiling_before_it_is_placed() -> None:
    cx, st = _setup(quota=_book(4))
    decision = cycle.gate(cx, st, cycle.nominate(cx, st, DEFAULT, _q("big", 0, devices=_gpus(8))))
    assert decision.explanation.reason == Reason.EXCEEDS_QUOTA
    assert decision.explanation.facts["requested"] == 8 and decision.explanation.facts["nominal"] == 4
    assert st.working.whole_free().sum() == 16  # nothing was taken


def test_gate_lets_a_task_within_its_quota_through() -> None:
    cx, st = _setup(quota=_book(8))
    assert cycle.gate(cx, st, cycle.nominate(cx, st, DEFAULT, _q("ok", 0, devices=_gpus(8)))) is None


def test_gate_keeps_everything_of_a_class_behind_its_blocked_head_when_backfill_is_off() -> None:
    running = [running_task("r", [alloc("g0", "h100", range(4))], preemptible=False)]
    cx, st = _setup(running, policy=SchedulingPolicySpec(classes={"gpu": ClassRule(backfill=False)}))
    gang = cycle.nominate(cx, st, DEFAULT, _q("gang", 0, workers=2, devices=_gpus(8)))
    cycle.leave_waiting(cx, st, gang, cycle.fit(cx, st, gang))
    decision = cycle.gate(cx, st, cycle.nominate(cx, st, DEFAULT, _q("small", 1, devices=_gpus(1))))
    assert decision.explanation.reason == Reason.BACKFILL_OFF
    assert decision.explanation.facts == {"blocking_task": "gang", "device_class": "gpu"}


# ------------------------------------------------------------------ fit and admit


def test_fit_takes_the_placement_on_the_working_snapshot_only() -> None:
    cx, st = _setup()
    result = cycle.fit(cx, st, cycle.nominate(cx, st, DEFAULT, _q("t", 0, devices=_gpus(8))))
    assert result.feasible
    assert st.working.whole_free().sum() == 8 and cx.snapshot.whole_free().sum() == 16


def test_admit_charges_the_quota_and_records_a_fits_explanation() -> None:
    book = _book(8)
    cx, st = _setup(quota=book)
    cand = cycle.nominate(cx, st, DEFAULT, _q("t", 0, devices=_gpus(8)))
    cycle.admit_within_quota(cx, st, cand, cycle.fit(cx, st, cand))
    assert st.decisions[0].admit and st.decisions[0].explanation.reason == Reason.FITS
    assert book.charged_tenant("t") == "ai-lab/nlp/p"


def test_admit_gives_the_placement_back_when_over_quota() -> None:
    book = _book(8)
    book.charge("other", ("ai-lab/x", "dev", "training"), cycle.held_by(_placed(8)))
    cx, st = _setup(quota=book)
    cand = cycle.nominate(cx, st, DEFAULT, _q("t", 0, devices=_gpus(4)))
    cycle.admit_within_quota(cx, st, cand, cycle.fit(cx, st, cand))
    assert st.decisions[0].explanation.reason == Reason.OVER_QUOTA
    assert st.working.whole_free().sum() == 16


def _placed(devices: int):
    cx, st = _setup()
    return cycle.fit(cx, st, cycle.nominate(cx, st, DEFAULT, _q("x", 0, devices=_gpus(devices))))


# ------------------------------------------------------------------ plan preemption


def test_plan_preemption_names_victims_and_never_plans_an_empty_preemption() -> None:
    running = [
        running_task("low", [alloc("g0", "h100", range(8))], priority="low"),
        running_task("l2", [alloc("g1", "h100", range(8))], priority="low"),
    ]
    cx, st = _setup(running)
    urgent = cycle.nominate(cx, st, DEFAULT, _q("u", 0, priority="high", devices=_gpus(8)))
    outcome = plan_preemption(cx, st, urgent, fits_idle=True)
    assert len(outcome.victims) == 1 and outcome.reason.startswith("preempted by u")
    # Nothing left to evict that is not already being evicted, and nothing that would help.
    cx, st = _setup()
    assert plan_preemption(cx, st, cycle.nominate(cx, st, DEFAULT, _q("u", 0, priority="high", devices=_gpus(8))), fits_idle=True).victims == []


def test_leave_waiting_records_a_preemption_with_its_facts() -> None:
    running = [running_task("low", [alloc("g0", "h100", range(8))], priority="low")]
    cx, st = _setup(running, nodes=("g0",))
    cand = cycle.nominate(cx, st, DEFAULT, _q("u", 0, priority="high", devices=_gpus(8)))
    cycle.leave_waiting(cx, st, cand, cycle.fit(cx, st, cand))
    expl = st.decisions[0].explanation
    assert expl.reason == Reason.PREEMPTING
    assert expl.facts["preempting"] == ["low"] and expl.facts["victim_count"] == 1
    assert expl.summary == "preempting 1 lower-priority task(s); starts when they have released their devices"


# ------------------------------------------------------------------ reserve or block


def test_reserve_holds_nodes_for_a_blocked_head_with_its_start() -> None:
    running = [running_task("r", [alloc("g0", "h100", range(4))], preemptible=False, expected_end=T0 + timedelta(hours=2))]
    cx, st = _setup(running)
    gang = cycle.nominate(cx, st, DEFAULT, _q("gang", 0, workers=2, devices=_gpus(8)))
    cycle.leave_waiting(cx, st, gang, cycle.fit(cx, st, gang))
    expl = st.decisions[0].explanation
    assert expl.reason == Reason.HOLDS_RESERVATION
    assert expl.facts["reservation"] == {"nodes": ["g0", "g1"], "start_at": (T0 + timedelta(hours=2)).isoformat()}
    assert st.reservations["default"].task_id == "gang"


def test_a_fifo_head_blocks_its_queue_instead_of_reserving() -> None:
    fifo = QueueSpec.model_validate({"kind": "Queue", "name": "strict", "ordering": "fifo"})
    running = [running_task("r", [alloc("g0", "h100", range(8))], preemptible=False)]
    queue = [_q("head", 0, queue="strict", devices=_gpus(8)), _q("next", 1, queue="strict", devices=_gpus(1))]
    cx, st = _setup(running, queue=queue, nodes=("g0",), queues=[fifo])
    q, head = next(cycle.heads(st, Blame()))
    cycle.decide(cx, st, q, head)
    assert st.reservations == {}
    cycle.requeue(cx, st, estimate=False)
    behind = {d.task_id: d.explanation for d in st.decisions}["next"]
    assert behind.reason == Reason.BEHIND_FIFO_HEAD and behind.summary == "waiting behind the head of fifo queue strict"


# ------------------------------------------------------------------ requeue with estimates


def test_requeue_estimates_the_waiting_and_leaves_out_those_that_can_never_start() -> None:
    running = [running_task("r", [alloc("g0", "h100", range(8))], preemptible=False, expected_end=T0 + timedelta(hours=1))]
    queue = [_q("w", 0, devices=_gpus(8)), _q("never", 1, workers=3, devices=_gpus(8))]
    cx, st = _setup(running, queue=queue, nodes=("g0",))
    for q, item in cycle.heads(st, Blame()):
        cycle.decide(cx, st, q, item)
    cycle.requeue(cx, st, estimate=True)
    facts = {d.task_id: d.explanation.facts for d in st.decisions}
    assert facts["w"]["position"] == 1 and facts["w"]["eta_basis"] == ETA_FORECAST
    assert facts["w"]["estimated_start"] == (T0 + timedelta(hours=1)).isoformat()
    assert facts["never"]["eta_basis"] == ETA_NONE and "position" not in facts["never"]
