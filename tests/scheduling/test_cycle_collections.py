"""A cycle defers the garbage collector's automatic collections to one young collection at
its end (core/interpreter.collections_deferred): the objects a cycle makes die by
reference counting, so collections in the middle of it walk objects about to be freed."""

from __future__ import annotations

import gc
from datetime import UTC, datetime, timedelta

import pytest

import hetpool.scheduling.cycle as cycle_module
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from tests.scheduling.factories import CUDA_STACK, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _estate_and_queue(tasks: int = 300):
    nodes = [node(f"g{i}", "nvidia-h100", 8, stack=CUDA_STACK) for i in range(4)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", [n.name for n in nodes])])
    queue = [QueuedTask(f"t{i}", task(f"t{i}", devices={"class": "gpu", "count": 1 + i % 3}), T0 + timedelta(seconds=i)) for i in range(tasks)]
    return snap, queue


@pytest.fixture
def eager_collector():
    """A young threshold so low that an undeferred cycle collects many times."""
    before = gc.get_threshold()
    gc.set_threshold(50, 10, 10)
    events: list[int] = []
    callback = lambda phase, info: events.append(info["generation"]) if phase == "start" else None  # noqa: E731
    gc.callbacks.append(callback)
    try:
        yield events
    finally:
        gc.callbacks.remove(callback)
        gc.set_threshold(*before)


def test_a_cycle_collects_once_at_its_end_and_leaves_the_collector_on(eager_collector) -> None:
    snap, queue = _estate_and_queue()
    eager_collector.clear()  # building the queue collected too
    result = run_cycle(snap, queue, CHECK, T0 + timedelta(hours=1))
    assert len(result.admitted) > 0 and len(result.decisions) > 100
    assert eager_collector == [0]  # one young collection, the deferred one
    assert gc.isenabled()


def test_a_cycle_that_raises_turns_the_collector_back_on(eager_collector, monkeypatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("shared data is broken")  # no task to blame: the cycle fails

    monkeypatch.setattr(cycle_module, "_run_cycle", broken)
    snap, queue = _estate_and_queue(10)
    with pytest.raises(RuntimeError, match="shared data is broken"):
        run_cycle(snap, queue, CHECK, T0)
    assert gc.isenabled()


def test_a_process_that_turned_the_collector_off_keeps_it_off(eager_collector) -> None:
    snap, queue = _estate_and_queue(50)
    gc.disable()
    eager_collector.clear()
    try:
        run_cycle(snap, queue, CHECK, T0)
        assert not gc.isenabled()
        assert eager_collector == []  # nothing collected on its behalf either
    finally:
        gc.enable()
