"""The queueing API: routing into named queues, aging, weighted dominant-resource fair
share, and the order in which `QueueOrder` hands out queue heads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from hetpool.core.policy import QueueSpec
from hetpool.core.tasks import Priority, TaskSpec
from hetpool.core.tenancy import TenantSpec
from hetpool.scheduling.queueing import DEFAULT_QUEUE, FairShare, QueueOrder, effective_rank, route, tenant_weight
from tests.scheduling.factories import task

T0 = datetime(2026, 1, 1, tzinfo=UTC)
LOW, NORMAL, HIGH, CRITICAL = (p.rank for p in (Priority.LOW, Priority.NORMAL, Priority.HIGH, Priority.CRITICAL))


def _queue(name: str, **fields) -> QueueSpec:
    return QueueSpec.model_validate({"kind": "Queue", "name": name, **fields})


# ------------------------------------------------------------------ route


def test_route_explicit_queue_wins_over_type_and_order() -> None:
    queues = [_queue("first", order=1), _queue("batch", task_types=["inference"], order=50)]
    # A training task naming "batch" goes there, although "batch" only routes inference
    # and "first" would accept it earlier.
    assert route(task("t", type="training", queue="batch"), queues).name == "batch"


def test_route_explicit_unknown_queue_falls_back_to_default() -> None:
    queues = [_queue("first", order=1)]
    routed = route(task("t", queue="nope"), queues)
    assert routed is DEFAULT_QUEUE
    assert routed.name == "default"


def test_route_by_task_type() -> None:
    queues = [_queue("serving", task_types=["inference"], order=1), _queue("training", task_types=["training"], order=2)]
    assert route(task("i", type="inference"), queues).name == "serving"
    assert route(task("t", type="training"), queues).name == "training"
    assert route(task("g", type="general"), queues).name == "default"


def test_route_by_template() -> None:
    queues = [_queue("sft", templates=["llm-sft"], order=1), _queue("other", templates=["something-else"], order=2)]
    assert route(task("t", template="llm-sft"), queues).name == "sft"
    assert route(task("t"), queues).name == "default"  # no template: a template-only queue does not accept it
    assert route(task("t", template="unrelated"), queues).name == "default"


def test_route_needs_both_type_and_template_when_a_queue_sets_both() -> None:
    queues = [_queue("both", task_types=["training"], templates=["llm-sft"])]
    assert route(task("t", type="training", template="llm-sft"), queues).name == "both"
    assert route(task("t", type="inference", template="llm-sft"), queues).name == "default"
    assert route(task("t", type="training", template="other"), queues).name == "default"


def test_route_respects_order_not_list_position() -> None:
    catch_all_late = _queue("late", order=200)
    catch_all_early = _queue("early", order=5)
    assert route(task("t"), [catch_all_late, catch_all_early]).name == "early"
    assert route(task("t"), [catch_all_early, catch_all_late]).name == "early"


def test_route_equal_order_breaks_ties_by_name() -> None:
    assert route(task("t"), [_queue("zeta", order=1), _queue("alpha", order=1)]).name == "alpha"


def test_route_specific_queue_first_then_catch_all() -> None:
    queues = [_queue("catch-all", order=100), _queue("inference", task_types=["inference"], order=10)]
    assert route(task("i", type="inference"), queues).name == "inference"
    assert route(task("t", type="training"), queues).name == "catch-all"


def test_route_without_queues_is_default() -> None:
    assert route(task("t"), []) is DEFAULT_QUEUE


# ------------------------------------------------------------------ aging


def test_effective_rank_without_waiting_is_the_base_rank() -> None:
    assert effective_rank(LOW, T0, T0, 0.5) == LOW
    assert effective_rank(NORMAL, T0, T0, 0.5) == NORMAL


def test_effective_rank_grows_with_waiting_time() -> None:
    ranks = [effective_rank(LOW, T0, T0 + timedelta(hours=h), 0.5) for h in (0, 1, 2, 3, 4, 5, 6)]
    assert ranks == [0, 0, 1, 1, 2, 2, 3]
    assert effective_rank(LOW, T0, T0 + timedelta(hours=1), 2.0) == 2


def test_effective_rank_caps_at_critical() -> None:
    assert effective_rank(LOW, T0, T0 + timedelta(days=30), 10) == CRITICAL
    assert effective_rank(HIGH, T0, T0 + timedelta(hours=100), 1) == CRITICAL
    assert effective_rank(CRITICAL, T0, T0 + timedelta(hours=100), 1) == CRITICAL


def test_effective_rank_no_aging_and_clock_skew() -> None:
    assert effective_rank(LOW, T0, T0 + timedelta(days=30), 0) == LOW
    # Queued "in the future" (clock skew) never lowers the rank.
    assert effective_rank(NORMAL, T0 + timedelta(hours=5), T0, 1) == NORMAL


# ------------------------------------------------------------------ fair share


def test_fair_share_is_the_dominant_resource_share() -> None:
    fair = FairShare((100.0, 1000.0, 4000.0), lambda tenant: 1.0)
    fair.add("a", 10, 500, 100)  # 10% accel, 50% cpu, 2.5% memory → 0.5
    fair.add("b", 40, 10, 100)  # 40% accel → 0.4
    fair.add("c", 1, 1, 2000)  # 50% memory → 0.5
    assert fair.share("a") == pytest.approx(0.5)
    assert fair.share("b") == pytest.approx(0.4)
    assert fair.share("c") == pytest.approx(0.5)
    assert fair.share("unknown") == 0.0


def test_fair_share_accumulates_and_is_recomputed_after_add() -> None:
    fair = FairShare((100.0, 1000.0, 4000.0), lambda tenant: 1.0)
    fair.add("a", 10, 0, 0)
    assert fair.share("a") == pytest.approx(0.1)  # cached now
    fair.add("a", 20, 0, 0)
    assert fair.share("a") == pytest.approx(0.3)


def test_fair_share_is_divided_by_weight() -> None:
    weights = {"a": 2.0, "b": 0.5}
    fair = FairShare((100.0, 100.0, 100.0), lambda tenant: weights.get(tenant, 1.0))
    for tenant in ("a", "b", "c"):
        fair.add(tenant, 40, 0, 0)
    assert fair.share("a") == pytest.approx(0.2)
    assert fair.share("b") == pytest.approx(0.8)
    assert fair.share("c") == pytest.approx(0.4)


def test_fair_share_tolerates_zero_totals() -> None:
    fair = FairShare((0.0, 100.0, 100.0), lambda tenant: 1.0)  # an estate without accelerators
    fair.add("a", 0, 10, 0)
    assert fair.share("a") == pytest.approx(0.1)


def test_tenant_weight_multiplies_along_the_path() -> None:
    weight = tenant_weight({"org": 2.0, "org/team": 3.0, "org/team/p": 5.0, "other": 0.5})
    assert weight("org") == pytest.approx(2.0)
    assert weight("org/team") == pytest.approx(6.0)
    assert weight("org/team/p") == pytest.approx(30.0)
    assert weight("org/team/q") == pytest.approx(6.0)  # unlisted project: inherits the product
    assert weight("org/x/y") == pytest.approx(2.0)
    assert weight("other/t") == pytest.approx(0.5)
    assert weight("nobody/t/p") == pytest.approx(1.0)


def test_tenant_weight_from_tenant_specs() -> None:
    tenants = [TenantSpec(name="ai-lab", weight=4), TenantSpec(name="ai-lab/nlp", weight=0.5)]
    weight = tenant_weight({t.name: t.weight for t in tenants})
    assert weight("ai-lab/nlp/p") == pytest.approx(2.0)
    assert weight("ai-lab/cv/p") == pytest.approx(4.0)


def test_tenant_weight_changes_who_is_ahead() -> None:
    # Same usage, but the heavier-weighted tenant has the smaller share.
    fair = FairShare((100.0, 100.0, 100.0), tenant_weight({"org/heavy": 10.0}))
    fair.add("org/heavy/p", 50, 0, 0)
    fair.add("org/light/p", 10, 0, 0)
    assert fair.share("org/heavy/p") < fair.share("org/light/p")


# ------------------------------------------------------------------ queue order


@dataclass(frozen=True)
class _Item:
    id: str
    spec: TaskSpec
    queued_at: datetime


def _item(task_id: str, minutes: float = 0, **fields) -> _Item:
    return _Item(task_id, task(task_id, **fields), T0 + timedelta(minutes=minutes))


def _order(items: list[_Item], queues: list[QueueSpec] = (), fair: FairShare | None = None) -> QueueOrder:
    fair = fair or FairShare((100.0, 100.0, 100.0), lambda tenant: 1.0)
    return QueueOrder(
        items,
        queue_of=lambda item: route(item.spec, list(queues)),
        rank_of=lambda item: item.spec.priority.rank,
        tenant_of=lambda item: item.spec.tenant,
        fair=fair,
    )


def _drain(order: QueueOrder) -> list[str]:
    out = []
    while (popped := order.pop()) is not None:
        out.append(popped[1].id)
    return out


def test_queue_order_priority_then_age() -> None:
    items = [_item("low", 0, priority="low"), _item("n-new", 20), _item("n-old", 10), _item("high", 30, priority="high")]
    assert _drain(_order(items)) == ["high", "n-old", "n-new", "low"]


def test_queue_order_fair_share_beats_age_within_a_priority() -> None:
    fair = FairShare((100.0, 100.0, 100.0), lambda tenant: 1.0)
    fair.add("org/busy", 50, 0, 0)
    items = [_item("busy-old", 0, tenant="org/busy"), _item("idle-new", 60, tenant="org/idle")]
    assert _drain(_order(items, fair=fair)) == ["idle-new", "busy-old"]


def test_queue_order_sees_share_updates_between_pops() -> None:
    fair = FairShare((100.0, 100.0, 100.0), lambda tenant: 1.0)
    items = [_item("a1", 0, tenant="org/a"), _item("a2", 1, tenant="org/a"), _item("b1", 2, tenant="org/b")]
    order = _order(items, fair=fair)
    assert order.pop()[1].id == "a1"
    fair.add("org/a", 10, 0, 0)
    assert order.pop()[1].id == "b1"
    assert order.pop()[1].id == "a2"
    assert order.pop() is None


def test_queue_order_fifo_ignores_priority_and_block_stops_the_queue() -> None:
    queues = [_queue("fifo", ordering="fifo", order=1, task_types=["training"])]
    items = [
        _item("f-old", 0, type="training"),
        _item("f-new-high", 10, type="training", priority="high"),
        _item("other", 5, type="inference"),
    ]
    drained = _drain(_order(items, queues))
    assert sorted(drained) == ["f-new-high", "f-old", "other"]
    assert drained.index("f-old") < drained.index("f-new-high")  # arrival order, not priority

    order = _order(items, queues)
    order.block("fifo")
    assert _drain(order) == ["other"]
    assert [(q.name, item.id) for q, item in order.remaining()] == [("fifo", "f-old"), ("fifo", "f-new-high")]
