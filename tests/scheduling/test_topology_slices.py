"""assign() with topology constraints (same node / network group / zone, device islands),
excluded nodes, device slices (memory_gb, cores_percent) and broken devices — with the
real device catalog and compatibility KB."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from hetpool.scheduling.assign import Assignment, assign
from hetpool.scheduling.cycle import QueuedTask, run_cycle
from hetpool.scheduling.filters import (
    REASON_DEVICES,
    REASON_EXCLUDED,
    REASON_FRACTION,
    REASON_ISLAND,
    REASON_SLICE_TOO_BIG,
    REASON_TOPOLOGY,
)
from hetpool.scheduling.snapshot import Snapshot
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, make_snapshot, node, pool, snapshot_with_running, task

CHECK = compat_check()
T0 = datetime(2026, 1, 1, tzinfo=UTC)
H100 = "nvidia-h100"
A100 = "nvidia-a100-80g"  # 80 GB


def _gpu_task(count: float = 1, workers: int = 1, *, topology: dict | None = None, **fields):
    extra = {"topology": topology} if topology else {}
    return task("t", devices={"class": "gpu", "count": count}, workers=workers, **extra, **fields)


def _apply(snap: Snapshot, result: Assignment) -> None:
    for p in result.placements:
        snap.take(snap.row_of(p.node, p.pool), p.device_indices, p.device_fraction, p.cpu, p.memory_gb)


def _estate(spec: dict[str, dict], used: dict[str, int] | None = None, model: str = H100, **pool_fields) -> Snapshot:
    """Nodes {name: node fields} in one pool "p"; `used` devices taken from index 0."""
    nodes = [node(name, model, fields.pop("count", 8), stack=CUDA_STACK, **fields) for name, fields in ((n, dict(f)) for n, f in spec.items())]
    allocations = [alloc(name, "p", range(k)) for name, k in (used or {}).items() if k]
    return make_snapshot(nodes, [pool("p", model, list(spec), **pool_fields)], allocations)


# ------------------------------------------------------------------ same node


def test_same_node_puts_all_workers_on_one_node() -> None:
    snap = _estate({"g0": {}, "g1": {}, "g2": {}}, used={"g0": 4, "g1": 4})
    result = assign(snap, _gpu_task(4, workers=2, topology={"same": "node"}), CHECK)
    assert result.feasible
    assert {p.node for p in result.placements} == {"g2"}


def test_same_node_fails_when_capacity_is_only_spread() -> None:
    snap = _estate({"g0": {}, "g1": {}}, used={"g0": 4, "g1": 4})
    spread_ok = assign(snap, _gpu_task(4, workers=2), CHECK)
    assert spread_ok.feasible and {p.node for p in spread_ok.placements} == {"g0", "g1"}  # control
    result = assign(snap, _gpu_task(4, workers=2, topology={"same": "node"}), CHECK)
    assert not result.feasible
    assert result.placements == []
    assert result.reasons[REASON_TOPOLOGY] == 1
    assert any("not within one node" in d for a in result.attempts for d in a.details)


def test_same_node_with_a_single_worker_is_unconstrained() -> None:
    snap = _estate({"g0": {}, "g1": {}}, used={"g0": 4})
    assert assign(snap, _gpu_task(4, topology={"same": "node"}), CHECK).feasible


# ------------------------------------------------------------------ same zone / network group


def test_same_zone_keeps_workers_in_one_zone() -> None:
    snap = _estate({"z1-a": {"zone": "z1"}, "z1-b": {"zone": "z1"}, "z2-a": {"zone": "z2"}, "z2-b": {"zone": "z2"}, "z2-c": {"zone": "z2"}})
    result = assign(snap, _gpu_task(8, workers=3, topology={"same": "zone"}), CHECK)
    assert result.feasible
    assert {p.node for p in result.placements} == {"z2-a", "z2-b", "z2-c"}


def test_same_zone_fails_when_no_zone_holds_the_gang() -> None:
    snap = _estate({"z1-a": {"zone": "z1"}, "z1-b": {"zone": "z1"}, "z2-a": {"zone": "z2"}})
    assert assign(snap, _gpu_task(8, workers=3), CHECK).feasible  # control: across zones it fits
    result = assign(snap, _gpu_task(8, workers=3, topology={"same": "zone"}), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_TOPOLOGY] == 1
    assert any("not within one zone" in d for a in result.attempts for d in a.details)


def test_zone_defaults_to_the_cluster_zone() -> None:
    # Nodes without their own zone share the cluster's: one partition, the gang fits.
    snap = _estate({"a": {}, "b": {}, "c": {}})
    assert assign(snap, _gpu_task(8, workers=3, topology={"same": "zone"}), CHECK).feasible


def test_same_network_group_keeps_workers_together() -> None:
    snap = _estate(
        {"n1": {"network_group": "ib-1"}, "n2": {"network_group": "ib-2"}, "n3": {"network_group": "ib-2"}, "n4": {"network_group": "ib-1"}},
        used={"n1": 4},
    )
    result = assign(snap, _gpu_task(8, workers=2, topology={"same": "network_group"}), CHECK)
    assert result.feasible
    assert {p.node for p in result.placements} == {"n2", "n3"}


def test_same_network_group_fails_across_groups() -> None:
    snap = _estate({"n1": {"network_group": "ib-1"}, "n2": {"network_group": "ib-2"}})
    assert assign(snap, _gpu_task(8, workers=2), CHECK).feasible  # control
    result = assign(snap, _gpu_task(8, workers=2, topology={"same": "network_group"}), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_TOPOLOGY] == 1


def test_nodes_without_network_group_are_each_their_own_group() -> None:
    snap = _estate({"n1": {}, "n2": {}})
    result = assign(snap, _gpu_task(8, workers=2, topology={"same": "network_group"}), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_TOPOLOGY] == 1


def test_topology_in_a_cycle_waits_with_the_topology_reason() -> None:
    snap = _estate({"g0": {}, "g1": {}}, used={"g0": 4, "g1": 4})
    queue = [QueuedTask("t", _gpu_task(4, workers=2, topology={"same": "node"}), T0)]
    decision = run_cycle(snap, queue, CHECK, T0 + timedelta(minutes=1)).decisions[0]
    assert not decision.admit
    assert decision.explanation.to_dict()["fits_when_idle"] is True
    assert REASON_TOPOLOGY in decision.explanation.to_dict()["summary"]


# ------------------------------------------------------------------ device islands


ISLANDS = [0, 0, 0, 0, 1, 1, 1, 1]


def _island_node(used: list[int]) -> Snapshot:
    n = node("g0", stack=CUDA_STACK, devices=[{"model": H100, "count": 8, "islands": ISLANDS}])
    return make_snapshot([n], [pool("p", H100, ["g0"])], [alloc("g0", "p", used)] if used else [])


def test_device_island_worker_lands_within_one_island() -> None:
    snap = _island_node(used=[0])  # island 0: 3 free, island 1: 4 free
    result = assign(snap, _gpu_task(4, topology={"device_island": True}), CHECK)
    assert result.feasible
    assert result.placements[0].device_indices == (4, 5, 6, 7)


def test_without_device_island_devices_may_straddle_islands() -> None:
    snap = _island_node(used=[0])
    result = assign(snap, _gpu_task(4), CHECK)
    assert result.feasible
    assert len({ISLANDS[i] for i in result.placements[0].device_indices}) == 2


def test_device_island_prefers_the_smallest_island_that_fits() -> None:
    snap = _island_node(used=[0, 1])  # island 0: 2 free, island 1: 4 free
    result = assign(snap, _gpu_task(2, topology={"device_island": True}), CHECK)
    assert result.feasible
    assert result.placements[0].device_indices == (2, 3)  # keeps island 1 whole


def test_device_island_fails_when_free_devices_are_split() -> None:
    snap = _island_node(used=[0, 4])  # 3 + 3 free
    assert assign(snap, _gpu_task(4), CHECK).feasible  # control: 6 free devices
    result = assign(snap, _gpu_task(4, topology={"device_island": True}), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_ISLAND] == 1


def test_device_island_two_workers_one_per_island() -> None:
    snap = _island_node(used=[])
    result = assign(snap, _gpu_task(4, workers=2, topology={"device_island": True}), CHECK)
    assert result.feasible
    assert sorted(p.device_indices for p in result.placements) == [(0, 1, 2, 3), (4, 5, 6, 7)]


# ------------------------------------------------------------------ excluded nodes


def test_exclude_nodes_keeps_the_task_off_them() -> None:
    snap = _estate({"g0": {}, "g1": {}}, used={"g1": 2})  # g1 is preferred when packing
    assert {p.node for p in assign(snap, _gpu_task(2), CHECK).placements} == {"g1"}  # control
    result = assign(snap, _gpu_task(2, exclude_nodes=["g1"]), CHECK)
    assert result.feasible
    assert {p.node for p in result.placements} == {"g0"}


def test_excluding_every_fitting_node_gives_the_excluded_reason() -> None:
    snap = _estate({"g0": {}, "g1": {}, "g2": {}})
    result = assign(snap, _gpu_task(8, workers=2, exclude_nodes=["g0", "g2", "not-a-node"]), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_EXCLUDED] == 2


def test_exclude_nodes_in_a_cycle_explains_the_reason() -> None:
    snap = _estate({"g0": {}})
    queue = [QueuedTask("t", _gpu_task(1, exclude_nodes=["g0"]), T0)]
    decision = run_cycle(snap, queue, CHECK, T0).decisions[0]
    assert not decision.admit
    assert "node excluded by the task" in decision.explanation.to_dict()["summary"]


# ------------------------------------------------------------------ slices


def _shareable(nodes: dict[str, int], shareable: bool = True) -> Snapshot:
    return make_snapshot(
        [node(name, A100, count, stack=CUDA_STACK) for name, count in nodes.items()],
        [pool("p", A100, list(nodes), shareable=shareable)],
    )


def _slice_task(name: str = "t", workers: int = 1, **device_fields):
    return task(name, devices={"class": "gpu", **device_fields}, workers=workers)


def _fraction_per_device(placements) -> dict[tuple[str, int], float]:
    used: dict[tuple[str, int], float] = defaultdict(float)
    for p in placements:
        for i in p.device_indices:
            used[(p.node, i)] += p.device_fraction
    return used


def test_two_memory_slices_share_a_device_and_the_third_goes_elsewhere() -> None:
    snap = _shareable({"g0": 2})
    placements = []
    for _ in range(3):
        result = assign(snap, _slice_task(memory_gb=40), CHECK)
        assert result.feasible
        assert result.placements[0].device_fraction == pytest.approx(0.5)
        _apply(snap, result)
        placements += result.placements
    devices = [p.device_indices for p in placements]
    assert devices[0] == devices[1]
    assert devices[2] != devices[0]
    assert all(v <= 1.0 + 1e-9 for v in _fraction_per_device(placements).values())


def test_memory_slices_never_oversubscribe_in_a_cycle() -> None:
    snap = _shareable({"g0": 2})
    queue = [QueuedTask(f"s{i}", _slice_task(f"s{i}", memory_gb=40), T0 + timedelta(seconds=i)) for i in range(5)]
    result = run_cycle(snap, queue, CHECK, T0)
    admitted = result.admitted
    assert len(admitted) == 4  # two 80 GB devices hold four 40 GB slices
    used = _fraction_per_device([p for d in admitted for p in d.assignment.placements])
    assert sorted(used.values()) == pytest.approx([1.0, 1.0])
    assert not _by_id_admit(result)["s4"]


def _by_id_admit(result) -> dict[str, bool]:
    return {d.task_id: d.admit for d in result.decisions}


def test_a_gang_of_slices_packs_per_device() -> None:
    snap = _shareable({"g0": 2})
    result = assign(snap, _slice_task(workers=3, memory_gb=40), CHECK)
    assert result.feasible
    used = _fraction_per_device(result.placements)
    assert sorted(used.values()) == pytest.approx([0.5, 1.0])
    assert not assign(snap.copy(), _slice_task(workers=5, memory_gb=40), CHECK).feasible


def test_uneven_slices_fill_the_fullest_device_that_still_has_room() -> None:
    snap = _shareable({"g0": 2})
    first = assign(snap, _slice_task(memory_gb=60), CHECK)  # 0.75 of device 0
    _apply(snap, first)
    second = assign(snap, _slice_task(memory_gb=40), CHECK)  # 0.5 does not fit in 0.25 left
    assert second.placements[0].device_indices != first.placements[0].device_indices
    _apply(snap, second)
    third = assign(snap, _slice_task(memory_gb=16), CHECK)  # 0.2 fits beside the 0.75
    assert third.placements[0].device_indices == first.placements[0].device_indices
    used = _fraction_per_device(first.placements + second.placements + third.placements)
    assert all(v <= 1.0 + 1e-9 for v in used.values())


def test_cores_percent_slices_take_the_larger_share() -> None:
    snap = _shareable({"g0": 1})
    result = assign(snap, _slice_task(memory_gb=8, cores_percent=60), CHECK)  # memory 0.1, compute 0.6
    assert result.placements[0].device_fraction == pytest.approx(0.6)
    _apply(snap, result)
    assert not assign(snap, _slice_task(cores_percent=50), CHECK).feasible
    assert assign(snap, _slice_task(cores_percent=40), CHECK).feasible


def test_memory_slice_on_a_non_shareable_pool_is_rejected() -> None:
    snap = _shareable({"g0": 8}, shareable=False)
    result = assign(snap, _slice_task(memory_gb=40), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_FRACTION] == 1


def test_slice_larger_than_one_device_is_rejected() -> None:
    snap = _shareable({"g0": 8})
    result = assign(snap, _slice_task(memory_gb=100), CHECK)  # 100 GB of an 80 GB device
    assert not result.feasible
    assert result.reasons[REASON_SLICE_TOO_BIG] == 1


def test_slice_of_the_whole_device_memory_takes_one_device() -> None:
    snap = _shareable({"g0": 1}, shareable=False)
    result = assign(snap, _slice_task(memory_gb=80), CHECK)
    assert result.feasible
    assert result.placements[0].device_fraction == pytest.approx(1.0)


def test_slice_does_not_fit_beside_a_whole_device_task() -> None:
    snap = _shareable({"g0": 1})
    _apply(snap, assign(snap, _gpu_task(1), CHECK))
    result = assign(snap, _slice_task(memory_gb=10), CHECK)
    assert not result.feasible
    assert result.reasons[REASON_DEVICES] == 1


# ------------------------------------------------------------------ unhealthy devices


def _broken(used: list[int] = (), **kw) -> Snapshot:
    nodes = [node("g0", A100, 8, stack=CUDA_STACK)]
    pools = [pool("p", A100, ["g0"], **kw)]
    snap = snapshot_with_running(nodes, pools, unhealthy_devices={"g0": {0, 3}})
    for i in used:
        snap.take(snap.row_of("g0", "p"), (i,), 1.0, 0, 0)
    return snap


def test_unhealthy_devices_are_never_allocated() -> None:
    snap = _broken()
    assert not assign(snap, _gpu_task(7), CHECK).feasible
    result = assign(snap, _gpu_task(6), CHECK)
    assert result.feasible
    assert set(result.placements[0].device_indices).isdisjoint({0, 3})


def test_unhealthy_devices_stay_unusable_on_the_emptied_snapshot() -> None:
    snap = _broken(used=[1, 2, 4])
    idle = snap.emptied()
    assert not assign(idle, _gpu_task(7), CHECK).feasible
    result = assign(idle, _gpu_task(6), CHECK)
    assert result.feasible
    assert set(result.placements[0].device_indices).isdisjoint({0, 3})
    assert np.all(idle.dev_free[0][[0, 3]] < 0)


def test_unhealthy_devices_never_get_slices() -> None:
    snap = _broken(shareable=True)
    placements = []
    for _ in range(12):  # 6 healthy devices hold 12 half slices
        result = assign(snap, _slice_task(memory_gb=40), CHECK)
        assert result.feasible
        _apply(snap, result)
        placements += result.placements
    assert not assign(snap, _slice_task(memory_gb=40), CHECK).feasible
    assert {i for p in placements for i in p.device_indices}.isdisjoint({0, 3})


def test_a_task_needing_broken_devices_cannot_run_anywhere() -> None:
    snap = _broken()
    decision = run_cycle(snap, [QueuedTask("t", _gpu_task(7), T0)], CHECK, T0).decisions[0]
    assert not decision.admit
    assert decision.explanation.to_dict()["fits_when_idle"] is False
