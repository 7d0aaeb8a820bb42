"""Placement of one task on a snapshot, with the real device catalog and compatibility KB."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.scheduling.assign import REASON_UNKNOWN_CANDIDATE, assign
from hetpool.scheduling.filters import (
    REASON_COMPAT,
    REASON_DEVICES,
    REASON_DEVICES_TOTAL,
    REASON_FEATURES,
    REASON_FRACTION,
    REASON_GANG,
    REASON_MEMORY,
    REASON_RESERVED,
    REASON_UNHEALTHY,
)
from hetpool.scheduling.snapshot import Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, cann_stack, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
R_NOT_ON_DEVICE = REASON_COMPAT + ": framework not supported on device"
R_CANN = REASON_COMPAT + ": CANN version cannot run framework version"


def _state(snap: Snapshot) -> tuple:
    return (snap.free_cpu.copy(), snap.free_mem.copy(), [d.copy() for d in snap.dev_free])


def _assert_same_state(before: tuple, snap: Snapshot) -> None:
    cpu, mem, devs = before
    np.testing.assert_array_equal(cpu, snap.free_cpu)
    np.testing.assert_array_equal(mem, snap.free_mem)
    assert len(devs) == len(snap.dev_free)
    for a, b in zip(devs, snap.dev_free, strict=True):
        np.testing.assert_array_equal(a, b)


def _gpu_nodes(prefix: str, model: str, n: int, count: int = 8) -> list:
    return [node(f"{prefix}{i}", model, count, stack=CUDA_STACK) for i in range(n)]


# ------------------------------------------------------------------ software compatibility


def test_mindspore_never_lands_on_gpus_even_when_they_are_idle() -> None:
    nodes = [*_gpu_nodes("g", "nvidia-a100-80g", 2), node("n0", "ascend-910b1", 8, stack=cann_stack("8.5.0"))]
    pools = [pool("a100", "nvidia-a100-80g", ["g0", "g1"]), pool("npu", "ascend-910b1", ["n0"])]
    snap = make_snapshot(nodes, pools, allocations=[alloc("n0", "npu", range(6))])
    spec = task(
        devices={"class": "npu", "count": 1},
        workers=2,
        framework={"name": "mindspore", "version": "2.9"},
        any_of=["nvidia-a100-80g", "ascend-910b1"],
        image="ms:2.9",
    )
    result = assign(snap, spec, CHECK)
    assert result.feasible
    assert {p.pool for p in result.placements} == {"npu"}
    assert sorted(p.device_indices for p in result.placements) == [(6,), (7,)]

    # With the NPUs full, the idle GPUs are still no option.
    snap = make_snapshot(nodes, pools, allocations=[alloc("n0", "npu", range(8))])
    result = assign(snap, spec, CHECK)
    assert not result.feasible
    assert result.reasons[R_NOT_ON_DEVICE] == 2  # one per GPU node
    assert result.placements == []
    assert result.reasons[R_NOT_ON_DEVICE] == 2
    assert any("MindSpore runs only on" in d for a in result.attempts for d in a.details)


@pytest.mark.parametrize("candidates", [{"any_of": ["nvidia-a100-80g", "nvidia-h100"]}, {"fallback": ["nvidia-a100-80g", "nvidia-h100"]}, {}])
def test_mindspore_on_gpu_only_inventory_is_infeasible(candidates: dict) -> None:
    nodes = [*_gpu_nodes("a", "nvidia-a100-80g", 2), *_gpu_nodes("h", "nvidia-h100", 1)]
    pools = [pool("a100", "nvidia-a100-80g", ["a0", "a1"]), pool("h100", "nvidia-h100", ["h0"])]
    spec = task(devices={"class": "gpu", "count": 1}, framework={"name": "mindspore"}, image="ms", **candidates)
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert not result.feasible
    assert set(result.reasons) == {R_NOT_ON_DEVICE}
    assert result.reasons[R_NOT_ON_DEVICE] == 3
    assert all(reason.startswith("incompatible software stack") for reason in result.reasons)


def _npu_inventory(include_new: bool = True):
    # The RC1 pool has the faster model and more nodes: the scorer would prefer it.
    nodes = [node(f"old{i}", "ascend-910b1", 8, stack=cann_stack("8.0.RC1")) for i in range(3)]
    pools = [pool("npu-rc1", "ascend-910b1", [n.name for n in nodes])]
    if include_new:
        nodes.append(node("new0", "ascend-910b3", 8, stack=cann_stack("8.0.0")))
        pools.append(pool("npu-800", "ascend-910b3", ["new0"]))
    return nodes, pools


def test_pytorch_24_on_npu_goes_to_cann_800_not_rc1() -> None:
    nodes, pools = _npu_inventory()
    spec = task(devices={"class": "npu", "count": 2}, workers=3, framework={"name": "pytorch", "version": "2.4"}, image="torch:2.4")
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert result.feasible
    assert [p.pool for p in result.placements] == ["npu-800"] * 3
    assert {p.node for p in result.placements} == {"new0"}
    assert result.reasons[R_CANN] == 3


def test_pytorch_24_with_only_rc1_pool_is_infeasible_counted_per_node() -> None:
    nodes, pools = _npu_inventory(include_new=False)
    spec = task(devices={"class": "npu", "count": 1}, framework={"name": "pytorch", "version": "2.4"}, image="torch:2.4")
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert not result.feasible
    assert result.reasons == Counter({R_CANN: 3})
    [attempt] = result.attempts
    assert attempt.outcome == "no-fit"
    assert attempt.pools == ["npu-rc1"]
    assert "8.0.RC1" in attempt.details[0]


def test_pytorch_22_runs_on_rc1() -> None:
    nodes, pools = _npu_inventory(include_new=False)
    spec = task(devices={"class": "npu", "count": 1}, framework={"name": "pytorch", "version": "2.2"}, image="torch:2.2")
    assert assign(make_snapshot(nodes, pools), spec, CHECK).feasible


# ------------------------------------------------------------------ fallback and any_of


def _h100_a100(h100_used: int = 0):
    nodes = [*_gpu_nodes("h", "nvidia-h100", 1), *_gpu_nodes("a", "nvidia-a100-80g", 1)]
    pools = [pool("h100", "nvidia-h100", ["h0"]), pool("a100", "nvidia-a100-80g", ["a0"])]
    allocations = [alloc("h0", "h100", range(h100_used))] if h100_used else []
    return make_snapshot(nodes, pools, allocations)


def test_ordered_fallback_uses_second_entry_when_first_is_full() -> None:
    snap = _h100_a100(h100_used=8)
    spec = task(devices={"class": "gpu", "count": 4}, fallback=["nvidia-h100", "nvidia-a100-80g"])
    result = assign(snap, spec, CHECK)
    assert result.feasible
    assert result.fallback_used is True
    assert result.chosen == "nvidia-a100-80g"
    assert [(p.pool, p.node, p.device_indices) for p in result.placements] == [("a100", "a0", (0, 1, 2, 3))]
    first, second = result.attempts
    assert (first.label, first.outcome, first.pools) == ("nvidia-h100", "no-fit", ["h100"])
    assert first.reasons == Counter({REASON_DEVICES: 1})
    assert (second.label, second.outcome) == ("nvidia-a100-80g", "fit")


def test_ordered_fallback_keeps_the_users_order() -> None:
    # Both fit; the H100 scores better, but the user listed the A100 first.
    spec = task(devices={"class": "gpu", "count": 4}, fallback=["nvidia-a100-80g", "nvidia-h100"])
    result = assign(_h100_a100(), spec, CHECK)
    assert result.feasible
    assert result.fallback_used is False
    assert {p.model for p in result.placements} == {"nvidia-a100-80g"}
    assert [a.label for a in result.attempts] == ["nvidia-a100-80g"]


def test_fallback_accepts_pool_names() -> None:
    spec = task(devices={"class": "gpu", "count": 1}, fallback=["h100", "a100"])
    result = assign(_h100_a100(h100_used=8), spec, CHECK)
    assert result.feasible and result.fallback_used
    assert result.placements[0].pool == "a100"


def test_any_of_is_not_a_fallback() -> None:
    spec = task(devices={"class": "gpu", "count": 4}, any_of=["nvidia-h100", "nvidia-a100-80g"])
    result = assign(_h100_a100(h100_used=8), spec, CHECK)
    assert result.feasible
    assert result.fallback_used is False
    assert result.placements[0].pool == "a100"
    assert len(result.attempts) == 1
    assert result.attempts[0].pools == ["a100", "h100"]


def test_any_of_prefers_the_faster_model_when_both_are_free() -> None:
    spec = task(devices={"class": "gpu", "count": 4}, any_of=["nvidia-a100-80g", "nvidia-h100"])
    result = assign(_h100_a100(), spec, CHECK)
    assert result.placements[0].model == "nvidia-h100"


def test_unknown_fallback_entry_is_reported_and_skipped() -> None:
    spec = task(devices={"class": "gpu", "count": 1}, fallback=["no-such-gpu", "nvidia-a100-80g"])
    result = assign(_h100_a100(), spec, CHECK)
    assert result.feasible
    assert result.fallback_used is True
    first = result.attempts[0]
    assert (first.label, first.outcome, first.pools) == ("no-such-gpu", "no-fit", [])
    assert first.reasons == Counter({REASON_UNKNOWN_CANDIDATE: 1})


def test_only_unknown_candidates_is_infeasible() -> None:
    spec = task(devices={"class": "gpu", "count": 1}, any_of=["no-such-gpu", "nor-this"])
    result = assign(_h100_a100(), spec, CHECK)
    assert not result.feasible
    assert result.reasons == Counter({REASON_UNKNOWN_CANDIDATE: 1})


# ------------------------------------------------------------------ gang, packing, spreading


def test_gang_needs_all_workers_at_once_and_takes_nothing() -> None:
    nodes = _gpu_nodes("g", "nvidia-h100", 2)
    pools = [pool("h100", "nvidia-h100", ["g0", "g1"])]
    snap = make_snapshot(nodes, pools, allocations=[alloc("g1", "h100", [0])])
    before = _state(snap)
    spec = task(devices={"class": "gpu", "count": 8}, workers=2)
    result = assign(snap, spec, CHECK)
    assert not result.feasible
    assert result.placements == []
    assert result.reasons[REASON_GANG] == 1
    assert result.reasons[REASON_DEVICES] == 1
    assert result.attempts[0].workers_fit == 1
    assert "1 of 2 workers fit now" in result.attempts[0].details
    _assert_same_state(before, snap)


def test_feasible_assign_does_not_change_the_snapshot() -> None:
    snap = make_snapshot(_gpu_nodes("g", "nvidia-h100", 2), [pool("h100", "nvidia-h100", ["g0", "g1"])])
    before = _state(snap)
    result = assign(snap, task(devices={"class": "gpu", "count": 8}, workers=2, per_worker={"cpu": 16, "memory_gb": 64}), CHECK)
    assert result.feasible
    assert sorted(p.node for p in result.placements) == ["g0", "g1"]
    _assert_same_state(before, snap)


def test_training_packs_workers_onto_one_node() -> None:
    snap = make_snapshot(_gpu_nodes("g", "nvidia-h100", 2), [pool("h100", "nvidia-h100", ["g0", "g1"])])
    result = assign(snap, task(type="training", devices={"class": "gpu", "count": 4}, workers=2), CHECK)
    assert result.feasible
    a, b = result.placements
    assert a.node == b.node
    assert set(a.device_indices).isdisjoint(b.device_indices)
    assert sorted(a.device_indices + b.device_indices) == list(range(8))
    assert [p.rank for p in result.placements] == [0, 1]


def test_training_prefers_the_partly_used_node() -> None:
    snap = make_snapshot(_gpu_nodes("g", "nvidia-h100", 2), [pool("h100", "nvidia-h100", ["g0", "g1"])], [alloc("g1", "h100", range(4))])
    result = assign(snap, task(type="training", devices={"class": "gpu", "count": 4}), CHECK)
    assert [(p.node, p.device_indices) for p in result.placements] == [("g1", (4, 5, 6, 7))]


def test_inference_spreads_replicas_across_nodes() -> None:
    snap = make_snapshot(_gpu_nodes("g", "nvidia-h100", 2), [pool("h100", "nvidia-h100", ["g0", "g1"])])
    result = assign(snap, task(type="inference", devices={"class": "gpu", "count": 1}, workers=2), CHECK)
    assert result.feasible
    assert sorted(p.node for p in result.placements) == ["g0", "g1"]


def test_deviceless_task_prefers_cpu_pool() -> None:
    nodes = [*_gpu_nodes("g", "nvidia-h100", 2), node("c0", cpu=64, mem=256)]
    # Pools are scanned by name: the GPU pools come first.
    pools = [pool("a-h100", "nvidia-h100", ["g0"]), pool("b-h100", "nvidia-h100", ["g1"]), pool("z-cpu", "cpu-x86-64", ["c0"])]
    result = assign(make_snapshot(nodes, pools), task(type="preprocessing", per_worker={"cpu": 8, "memory_gb": 16}), CHECK)
    assert result.feasible
    [placement] = result.placements
    assert (placement.pool, placement.node, placement.device_indices) == ("z-cpu", "c0", ())


def test_deviceless_task_uses_gpu_node_cpus_when_cpu_pool_is_full() -> None:
    nodes = [*_gpu_nodes("g", "nvidia-h100", 1), node("c0", cpu=8, mem=256)]
    pools = [pool("h100", "nvidia-h100", ["g0"]), pool("z-cpu", "cpu-x86-64", ["c0"])]
    result = assign(make_snapshot(nodes, pools), task(per_worker={"cpu": 16, "memory_gb": 16}), CHECK)
    assert result.feasible
    assert result.placements[0].pool == "h100"
    assert result.placements[0].device_indices == ()


# ------------------------------------------------------------------ fractional devices


def _shared_inventory():
    nodes = [node("d0", "nvidia-a100-80g", 2, stack=CUDA_STACK), node("s0", "nvidia-a10", 2, stack=CUDA_STACK)]
    pools = [pool("dedicated", "nvidia-a100-80g", ["d0"]), pool("shared", "nvidia-a10", ["s0"], shareable=True)]
    return nodes, pools


def test_fractional_request_only_on_shareable_pools_and_workers_share_a_device() -> None:
    nodes, pools = _shared_inventory()
    snap = make_snapshot(nodes, pools)
    before = _state(snap)
    result = assign(snap, task(devices={"class": "gpu", "count": 0.5}, workers=2), CHECK)
    assert result.feasible
    assert [(p.pool, p.node, p.device_indices, p.device_fraction) for p in result.placements] == [
        ("shared", "s0", (0,), 0.5),
        ("shared", "s0", (0,), 0.5),
    ]
    assert result.reasons[REASON_FRACTION] == 1
    _assert_same_state(before, snap)


def test_fractional_request_fills_a_partly_used_device_first() -> None:
    nodes, pools = _shared_inventory()
    snap = make_snapshot(nodes, pools, [alloc("s0", "shared", [1], fraction=0.25)])
    result = assign(snap, task(devices={"class": "gpu", "count": 0.5}), CHECK)
    assert result.placements[0].device_indices == (1,)


def test_fractional_request_without_shareable_pool_is_infeasible() -> None:
    nodes, pools = _shared_inventory()
    result = assign(make_snapshot(nodes[:1], pools[:1]), task(devices={"class": "gpu", "count": 0.5}), CHECK)
    assert not result.feasible
    assert result.reasons == Counter({REASON_FRACTION: 1})


def test_fractional_workers_beyond_shareable_capacity_are_infeasible() -> None:
    nodes, pools = _shared_inventory()
    result = assign(make_snapshot(nodes, pools), task(devices={"class": "gpu", "count": 0.5}, workers=5), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_GANG] == 1
    # One attempt per device model (a gang stays on one model): the shareable A10s hold 4.
    assert max(a.workers_fit for a in result.attempts) == 4


# ------------------------------------------------------------------ pool filters


def test_min_memory_gb_filters_small_devices() -> None:
    nodes, pools = _shared_inventory()
    pools = [pools[0], pool("shared", "nvidia-a10", ["s0"])]
    spec = task(devices={"class": "gpu", "count": 1, "min_memory_gb": 40})
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert result.feasible
    assert result.placements[0].model == "nvidia-a100-80g"
    assert result.reasons[REASON_MEMORY] == 1

    only_small = assign(make_snapshot(nodes[1:], pools[1:]), spec, CHECK)
    assert not only_small.feasible
    assert only_small.reasons == Counter({REASON_MEMORY: 1})


def test_catalog_fp8_features() -> None:
    catalog = DeviceCatalog.builtin()
    assert "fp8" not in catalog.get("nvidia-a100-80g").features
    assert "fp8" in catalog.get("nvidia-h800").features
    assert "fp8" in catalog.get("nvidia-h100").features


def test_required_features_reject_a100_and_accept_h800() -> None:
    nodes = [*_gpu_nodes("a", "nvidia-a100-80g", 2), *_gpu_nodes("h", "nvidia-h800", 1)]
    pools = [pool("a100", "nvidia-a100-80g", ["a0", "a1"]), pool("h800", "nvidia-h800", ["h0"])]
    spec = task(devices={"class": "gpu", "count": 1}, features=["FP8"])
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert result.feasible
    assert result.placements[0].model == "nvidia-h800"
    assert result.reasons[REASON_FEATURES] == 2

    only_a100 = assign(make_snapshot(nodes[:2], pools[:1]), spec, CHECK)
    assert not only_a100.feasible
    assert only_a100.reasons == Counter({REASON_FEATURES: 2})
    assert only_a100.attempts[0].details == ["a100: nvidia-a100-80g lacks fp8"]


@pytest.mark.parametrize(("tenant", "ok"), [("infra/x", False), ("ai-lab", True), ("ai-lab/nlp/p", True), ("ai-labs/x", False)])
def test_reserved_pool_admits_only_its_tenants(tenant: str, ok: bool) -> None:
    snap = make_snapshot(_gpu_nodes("g", "nvidia-h100", 1), [pool("h100", "nvidia-h100", ["g0"], reserved_for={"tenants": ["ai-lab"]})])
    result = assign(snap, task(tenant=tenant, devices={"class": "gpu", "count": 1}), CHECK)
    assert result.feasible is ok
    if not ok:
        assert result.reasons == Counter({REASON_RESERVED: 1})
        assert "reserved for ai-lab" in result.attempts[0].details[0]


def test_reservation_min_priority_lets_urgent_work_in() -> None:
    snap = make_snapshot(
        _gpu_nodes("g", "nvidia-h100", 1), [pool("h100", "nvidia-h100", ["g0"], reserved_for={"tenants": ["ai-lab"], "min_priority": "high"})]
    )
    assert not assign(snap, task(tenant="infra/x", devices={"class": "gpu"}, priority="normal"), CHECK).feasible
    assert assign(snap, task(tenant="infra/x", devices={"class": "gpu"}, priority="critical"), CHECK).feasible


def test_unhealthy_node_is_skipped() -> None:
    nodes = _gpu_nodes("g", "nvidia-h100", 2)
    pools = [pool("h100", "nvidia-h100", ["g0", "g1"])]
    spec = task(devices={"class": "gpu", "count": 8}, workers=2)
    assert assign(make_snapshot(nodes, pools), spec, CHECK).feasible
    result = assign(make_snapshot(nodes, pools, unhealthy_nodes={"g0"}), spec, CHECK)
    assert not result.feasible
    assert result.reasons[REASON_UNHEALTHY] == 1
    assert result.attempts[0].workers_fit == 1

    one = assign(make_snapshot(nodes, pools, unhealthy_nodes={"g0"}), task(devices={"class": "gpu", "count": 1}), CHECK)
    assert one.feasible
    assert one.placements[0].node == "g1"


def test_unschedulable_node_is_skipped() -> None:
    nodes = [node("g0", "nvidia-h100", 8, stack=CUDA_STACK, schedulable=False), node("g1", "nvidia-h100", 8, stack=CUDA_STACK)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])])
    result = assign(snap, task(type="training", devices={"class": "gpu", "count": 1}, workers=3), CHECK)
    assert result.feasible
    assert {p.node for p in result.placements} == {"g1"}


def test_wrong_device_class_is_not_considered() -> None:
    nodes, pools = _npu_inventory()
    result = assign(make_snapshot(nodes, pools), task(devices={"class": "gpu", "count": 1}), CHECK)
    assert not result.feasible
    assert result.attempts[0].pools == []
    assert result.reasons == Counter({"no pool offers the requested devices": 1})


def test_impossible_task_counts_nodes_per_reason() -> None:
    nodes = [*_gpu_nodes("h", "nvidia-h100", 3), *_gpu_nodes("t", "nvidia-t4", 2, count=4)]
    pools = [pool("h100", "nvidia-h100", ["h0", "h1", "h2"]), pool("t4", "nvidia-t4", ["t0", "t1"])]
    spec = task(devices={"class": "gpu", "count": 16}, features=["bf16"])
    result = assign(make_snapshot(nodes, pools), spec, CHECK)
    assert not result.feasible
    assert result.reasons == Counter({REASON_DEVICES_TOTAL: 3, REASON_FEATURES: 2})


def test_host_cpu_and_memory_limit_workers() -> None:
    nodes = [node("g0", "nvidia-h100", 8, cpu=16, mem=128, stack=CUDA_STACK)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0"])])
    assert not assign(snap, task(devices={"class": "gpu"}, per_worker={"cpu": 32}), CHECK).feasible
    result = assign(snap, task(devices={"class": "gpu"}, workers=3, per_worker={"cpu": 8}), CHECK)
    assert not result.feasible
    assert result.attempts[0].workers_fit == 2
    assert result.reasons[REASON_GANG] == 1


def test_placement_price_is_per_device_held() -> None:
    nodes, pools = _shared_inventory()
    pools = [pool("shared", "nvidia-a10", ["s0"], shareable=True, price_per_hour=2.0)]
    result = assign(make_snapshot(nodes[1:], pools), task(devices={"class": "gpu", "count": 0.5}), CHECK)
    assert result.placements[0].price_per_hour == pytest.approx(1.0)
    whole = assign(make_snapshot(nodes[1:], pools), task(devices={"class": "gpu", "count": 2}), CHECK)
    assert whole.placements[0].price_per_hour == pytest.approx(4.0)


# ------------------------------------------------------------------ node stacks vs the pool's default stack


def test_effective_stack_prefers_the_node_over_the_pool_default() -> None:
    from hetpool.scheduling.snapshot import effective_stack

    n = node("n0", "ascend-910b1", stack=cann_stack("8.0.RC1"))
    p = pool("npu", "ascend-910b1", ["n0"], stack=cann_stack("8.0.0"))
    assert effective_stack(n, p).runtime.version == "8.0.RC1"
    assert effective_stack(node("n1", "ascend-910b1"), p).runtime.version == "8.0.0"


def test_pool_default_stack_is_used_for_nodes_without_one() -> None:
    spec = task(devices={"class": "npu"}, framework={"name": "pytorch", "version": "2.4"}, image="torch:2.4")
    ok = make_snapshot([node("n0", "ascend-910b1")], [pool("npu", "ascend-910b1", ["n0"], stack=cann_stack("8.0.0"))])
    assert assign(ok, spec, CHECK).feasible
    old = make_snapshot([node("n0", "ascend-910b1")], [pool("npu", "ascend-910b1", ["n0"], stack=cann_stack("8.0.RC1"))])
    assert assign(old, spec, CHECK).reasons == Counter({R_CANN: 1})


def test_node_stack_wins_over_pool_default_rc1_node_rejected() -> None:
    snap = make_snapshot([node("n0", "ascend-910b1", stack=cann_stack("8.0.RC1"))], [pool("npu", "ascend-910b1", ["n0"], stack=cann_stack("8.0.0"))])
    spec = task(devices={"class": "npu"}, framework={"name": "pytorch", "version": "2.4"}, image="torch:2.4")
    assert not assign(snap, spec, CHECK).feasible


def test_node_stack_wins_over_pool_default_800_node_accepted() -> None:
    snap = make_snapshot([node("n0", "ascend-910b1", stack=cann_stack("8.0.0"))], [pool("npu", "ascend-910b1", ["n0"], stack=cann_stack("8.0.RC1"))])
    spec = task(devices={"class": "npu"}, framework={"name": "pytorch", "version": "2.4"}, image="torch:2.4")
    assert assign(snap, spec, CHECK).feasible


def test_without_explain_a_placement_is_the_same_and_a_no_fit_skips_the_per_row_reasons() -> None:
    """Callers that only ask whether or where a task fits (preemption search, backfill
    start times, the forecast) pass explain=False: the answer is the same, only the costly
    per-row account of why it failed is left out."""
    nodes = [node("g0", "nvidia-h100", 8, stack=CUDA_STACK), node("g1", "nvidia-h100", 8, stack=CUDA_STACK)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"])])
    fits = task(devices={"class": "gpu", "count": 8})
    explained, bare = assign(snap, fits, CHECK), assign(snap, fits, CHECK, explain=False)
    assert bare.feasible and [(p.node, p.device_indices) for p in bare.placements] == [(p.node, p.device_indices) for p in explained.placements]
    too_wide = task(devices={"class": "gpu", "count": 8}, workers=3)
    explained, bare = assign(snap, too_wide, CHECK), assign(snap, too_wide, CHECK, explain=False)
    assert not explained.feasible and not bare.feasible
    assert explained.reasons and "2 of 3 workers fit now" in explained.attempts[0].details
    assert not bare.reasons and bare.attempts[0].workers_fit == 2 and bare.attempts[0].outcome == "no-fit"
