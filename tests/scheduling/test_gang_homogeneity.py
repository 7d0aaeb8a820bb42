"""A gang stays on one device model (issue 16, item 5): a `class: gpu` DDP job never
runs on an H800 plus an A100. Models are tried fastest first for the task; mixing is
allowed only when the task says `devices.mix_models: true`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from hetpool.core.inventory import TaskType
from hetpool.scheduling.assign import REASON_ACROSS_MODELS, assign
from hetpool.scheduling.cycle import QueuedTask
from hetpool.scheduling.filters import REASON_GANG
from hetpool.scheduling.forecast import forecast_starts
from hetpool.scheduling.running import RunningTask
from tests.scheduling.factories import CUDA_STACK, alloc, catalog_models, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
A100, H800 = "nvidia-a100-80g", "nvidia-h800"
NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)


def _estate(h800_nodes: int = 1, a100_nodes: int = 2, allocations=()):
    nodes = [node(f"h{i}", H800, 8, stack=CUDA_STACK) for i in range(h800_nodes)]
    nodes += [node(f"a{i}", A100, 8, stack=CUDA_STACK) for i in range(a100_nodes)]
    pools = [pool("h800", H800, [f"h{i}" for i in range(h800_nodes)]), pool("a100", A100, [f"a{i}" for i in range(a100_nodes)])]
    return make_snapshot(nodes, pools, allocations)


def _gang(workers: int = 2, devices: dict | None = None, **fields):
    return task("ddp", devices={"class": "gpu", "count": 8, **(devices or {})}, workers=workers, **fields)


def test_a_class_gang_lands_on_one_model_while_two_of_it_are_idle() -> None:
    """The reported case: one H800 node and two A100 nodes idle; before, H800 + A100."""
    result = assign(_estate(), _gang(), CHECK)
    assert result.feasible
    assert {p.model for p in result.placements} == {A100}
    assert [a.label for a in result.attempts] == [f"class gpu: {H800}", f"class gpu: {A100}"]
    assert result.attempts[0].reasons == {REASON_GANG: 1} and not result.fallback_used


def test_the_fastest_model_that_holds_the_whole_gang_is_tried_first() -> None:
    result = assign(_estate(h800_nodes=2), _gang(), CHECK)
    assert {p.model for p in result.placements} == {H800}
    # The task's own speed figures decide the order when it gives them.
    vouched = _gang(relative_performance={A100: 9.0})
    assert {p.model for p in assign(_estate(h800_nodes=2), vouched, CHECK).placements} == {A100}


def test_a_gang_that_only_fits_across_models_waits_unless_mixing_is_allowed() -> None:
    snap = _estate(a100_nodes=1)
    strict = assign(snap, _gang(), CHECK)
    assert not strict.feasible and strict.reasons[REASON_GANG] == 2
    # The way out is named: the workers would fit across models.
    assert strict.reasons[REASON_ACROSS_MODELS] == 1
    assert "set devices.mix_models: true" in strict.attempts[-1].details[-1]
    mixed = assign(snap, _gang(devices={"mix_models": True}), CHECK)
    assert mixed.feasible and {p.model for p in mixed.placements} == {A100, H800}
    assert [a.label for a in mixed.attempts] == ["class gpu"]


@pytest.mark.parametrize(
    "choice",
    [{"devices": {"models": [H800, A100]}}, {"any_of": [H800, "a100"]}],
    ids=["models", "any_of"],
)
def test_named_models_and_any_of_are_homogeneous_too(choice: dict) -> None:
    spec = _gang(**choice)
    assert {p.model for p in assign(_estate(), spec, CHECK).placements} == {A100}
    assert not assign(_estate(a100_nodes=1), spec, CHECK).feasible
    devices = {**choice.get("devices", {}), "mix_models": True}
    mixed = _gang(**{**choice, "devices": devices})
    assert {p.model for p in assign(_estate(a100_nodes=1), mixed, CHECK).placements} == {A100, H800}


def test_a_fallback_entry_after_a_split_class_still_counts_as_fallback() -> None:
    spec = _gang(devices={"models": [H800, A100]}, fallback=["nvidia-h100"])
    snap = make_snapshot(
        [node(name, model, 8, stack=CUDA_STACK) for name, model in (("h0", H800), ("a0", A100), ("x0", "nvidia-h100"), ("x1", "nvidia-h100"))],
        [pool("h800", H800, ["h0"]), pool("a100", A100, ["a0"]), pool("h100", "nvidia-h100", ["x0", "x1"])],
    )
    result = assign(snap, spec, CHECK)
    assert result.fallback_used and {p.model for p in result.placements} == {"nvidia-h100"}


def test_one_worker_is_one_model_anyway_and_keeps_its_single_group() -> None:
    result = assign(_estate(), _gang(workers=1), CHECK)
    assert result.feasible and [a.label for a in result.attempts] == ["class gpu"]


def test_the_forecast_waits_for_one_model_instead_of_mixing_now() -> None:
    """One H800 and one A100 idle, the other A100 busy for an hour: the gang starts in an
    hour on two A100s (before: now, on an H800 and an A100)."""
    busy = RunningTask(
        id="r1",
        tenant="ai-lab/nlp/p",
        priority_rank=0,
        task_type=TaskType.TRAINING,
        allocations=(alloc("a1", "a100", range(8)),),
        started_at=NOW - timedelta(hours=1),
        expected_end=NOW + timedelta(hours=1),
    )
    snap = _estate(allocations=busy.allocations)
    queued = QueuedTask(id="ddp", spec=_gang(runtime_estimate="2h"), queued_at=NOW)
    est = forecast_starts(snap, [queued], [busy], CHECK, NOW, catalog_models())["ddp"]
    assert est.start_at == NOW + timedelta(hours=1) and est.model == A100


def test_mix_models_must_be_a_yes_or_no() -> None:
    with pytest.raises(ValidationError, match="mix_models"):
        _gang(devices={"mix_models": "sometimes"})
