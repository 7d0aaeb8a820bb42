"""Estimates: runtime scaled by relative performance, and cost per hour of placements."""

from __future__ import annotations

import pytest

from hetpool.catalog.devices import REFERENCE_MODEL, DeviceCatalog
from hetpool.core.inventory import DeviceModelSpec, TaskType
from hetpool.core.units import format_duration as describe_runtime
from hetpool.scheduling.assign import WorkerPlacement, assign
from hetpool.scheduling.estimate import cost_per_hour, runtime_on
from tests.scheduling.factories import CUDA_STACK, compat_check, make_snapshot, node, pool, task

CATALOG = DeviceCatalog.builtin()


def _model(perf: dict[str, float]) -> DeviceModelSpec:
    return DeviceModelSpec.model_validate(
        {
            "kind": "DeviceModel",
            "name": "fast-gpu",
            "vendor": "generic",
            "class": "gpu",
            "display_name": "Fast",
            "memory_gb": 80,
            "relative_performance": perf,
        }
    )


def _placement(price: float, rank: int = 0) -> WorkerPlacement:
    return WorkerPlacement(
        rank=rank, node="n", pool="p", model="m", device_indices=(0,), device_fraction=1.0, cpu=1, memory_gb=1, price_per_hour=price
    )


def test_perf_two_halves_the_runtime() -> None:
    spec = task(type="training", devices={"class": "gpu"}, runtime_estimate="6h")
    assert runtime_on(spec, _model({"training": 2.0})) == pytest.approx(3 * 3600)
    assert runtime_on(spec, _model({"training": 0.5})) == pytest.approx(12 * 3600)


def test_runtime_uses_catalog_performance_per_task_type() -> None:
    h100 = CATALOG.get("nvidia-h100")
    h20 = CATALOG.get("nvidia-h20")
    reference = CATALOG.get(REFERENCE_MODEL)
    assert reference.perf_for(TaskType.TRAINING) == 1.0
    training = task(type="training", devices={"class": "gpu"}, runtime_estimate="10h")
    inference = task(type="inference", devices={"class": "gpu"}, runtime_estimate="10h")
    assert runtime_on(training, reference) == pytest.approx(36000)
    assert runtime_on(training, h100) == pytest.approx(36000 / h100.relative_performance[TaskType.TRAINING])
    assert runtime_on(training, h100) < runtime_on(training, reference)
    # The H20 is slower than the reference for training but faster for inference.
    assert h20.relative_performance[TaskType.TRAINING] < 1.0 < h20.relative_performance[TaskType.INFERENCE]
    assert runtime_on(training, h20) > 36000 > runtime_on(inference, h20)
    assert runtime_on(inference, h20) == pytest.approx(36000 / h20.relative_performance[TaskType.INFERENCE])


def test_runtime_falls_back_to_general_then_reference() -> None:
    spec = task(type="offload", devices={"class": "gpu"}, runtime_estimate="2h")
    assert runtime_on(spec, _model({"general": 4.0})) == pytest.approx(1800)
    assert runtime_on(spec, _model({})) == pytest.approx(7200)


def test_runtime_without_estimate_model_or_devices() -> None:
    assert runtime_on(task(devices={"class": "gpu"}), CATALOG.get("nvidia-h100")) is None
    with_estimate = task(devices={"class": "gpu"}, runtime_estimate="90m")
    assert runtime_on(with_estimate, None) == 5400
    deviceless = task(runtime_estimate="90m")
    assert runtime_on(deviceless, CATALOG.get("nvidia-h100")) == 5400


def test_describe_runtime() -> None:
    assert describe_runtime(runtime_on(task(type="training", devices={"class": "gpu"}, runtime_estimate="6h"), _model({"training": 2.0}))) == "3h"
    assert describe_runtime(None) == "-"


def test_cost_per_hour_sums_placements() -> None:
    assert cost_per_hour([]) == 0
    assert cost_per_hour([_placement(3.5, 0), _placement(1.25, 1), _placement(0.0, 2)]) == 4.75
    assert cost_per_hour([_placement(1 / 3, i) for i in range(3)]) == 1.0


def test_cost_per_hour_of_a_real_assignment() -> None:
    nodes = [node(f"g{i}", "nvidia-h100", 8, stack=CUDA_STACK) for i in range(2)]
    snap = make_snapshot(nodes, [pool("h100", "nvidia-h100", ["g0", "g1"], price_per_hour=2.5)])
    result = assign(snap, task(devices={"class": "gpu", "count": 4}, workers=3), compat_check())
    assert result.feasible
    assert [p.price_per_hour for p in result.placements] == [10.0, 10.0, 10.0]
    assert cost_per_hour(result.placements) == 30.0
