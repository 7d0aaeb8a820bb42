"""Task type <-> device class rules (issue 16, item 4): the catalog says which task types
each device class takes, and the core's filters apply it to every candidate — the device
class, named models, `any_of` and `fallback` entries alike — in assign and in preemption."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from hetpool.catalog.devices import DeviceCatalog
from hetpool.catalog.task_types import builtin_rules, parse_rules, task_type_verdict
from hetpool.core.errors import SpecError
from hetpool.core.inventory import DeviceClass, TaskType
from hetpool.core.tasks import Priority
from hetpool.scheduling.assign import assign
from hetpool.scheduling.filters import REASON_TASK_TYPE
from hetpool.scheduling.preempt import find_victims
from hetpool.scheduling.running import RunningTask
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
H100, BF3, X86 = "nvidia-h100", "nvidia-bluefield-3", "cpu-x86-64"
OFFLOAD_ON_DPU = {"class": "dpu", "count": 1}


def _estate(dpu_busy: bool = False):
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("d0", BF3, 1), node("c0", X86, 2)]
    pools = [pool("h100", H100, ["g0"]), pool("bf3", BF3, ["d0"]), pool("cpu", X86, ["c0"])]
    busy = [alloc("d0", "bf3", [0])] if dpu_busy else []
    return make_snapshot(nodes, pools, allocations=busy)


# ------------------------------------------------------------------ the catalog's rules


def test_the_rules_name_every_device_class_and_keep_offload_on_dpus() -> None:
    rules = builtin_rules()
    assert set(rules.takes) == set(DeviceClass)
    assert rules.takes[DeviceClass.DPU] == {TaskType.OFFLOAD}
    assert all(TaskType.OFFLOAD not in rules.takes[c] for c in (DeviceClass.GPU, DeviceClass.NPU, DeviceClass.CPU))
    assert TaskType.TRAINING not in rules.takes[DeviceClass.CPU]


def test_every_model_and_task_type_gets_an_answer_with_a_reason() -> None:
    for model in DeviceCatalog.builtin():
        for task_type in TaskType:
            verdict = task_type_verdict(model, task_type)
            assert verdict.ok == (task_type in builtin_rules().takes[model.device_class] and model.perf_for(task_type) >= 0.1)
            assert verdict.ok or verdict.why, (model.name, task_type)


def test_too_slow_for_a_type_unless_the_task_says_otherwise() -> None:
    p310 = DeviceCatalog.builtin().get("ascend-310p")
    assert not task_type_verdict(p310, TaskType.TRAINING).ok  # 0.05 of an A100
    assert task_type_verdict(p310, TaskType.TRAINING, performance=0.5).ok
    assert task_type_verdict(p310, TaskType.INFERENCE).ok


@pytest.mark.parametrize(
    "data, message",
    [
        ({"classes": {"gpu": ["training"], "npu": [], "cpu": [], "dpu": [], "fpga": []}}, "fpga"),
        ({"classes": {"gpu": ["trainnig"], "npu": [], "cpu": [], "dpu": []}}, "trainnig"),
        ({"classes": {"gpu": ["training"]}}, "no rule for device class"),
        ({"min_useful_performance": "fast", "classes": {"gpu": [], "npu": [], "cpu": [], "dpu": []}}, "fast"),
        (["gpu"], "expected a mapping"),
    ],
)
def test_bad_rules_are_a_clear_error(data, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_rules(data, "rules.yaml")


# ------------------------------------------------------------------ assign


def test_offload_work_asking_for_gpus_is_not_placed_on_them() -> None:
    result = assign(_estate(), task(type="offload", devices={"class": "gpu", "count": 1}), CHECK)
    assert not result.feasible
    assert result.reasons == {REASON_TASK_TYPE: 1}
    assert result.attempts[0].details == ["h100: gpu devices do not take offload work"]


@pytest.mark.parametrize(
    "candidates, dpu_named",
    [
        ({"fallback": ["h100"]}, False),
        ({"fallback": [BF3, H100]}, True),
        ({"any_of": [BF3, "h100"]}, True),
        ({"per_worker": {"devices": {**OFFLOAD_ON_DPU, "models": [H100]}}}, False),
    ],
    ids=["fallback-pool", "fallback-after-dpu", "any_of", "models"],
)
def test_naming_a_gpu_does_not_switch_the_rule_off(candidates: dict, dpu_named: bool) -> None:
    """The DPU is busy: before, the GPU named in fallback / any_of / models took the offload work."""
    spec = task(type="offload", devices=OFFLOAD_ON_DPU, **candidates)
    result = assign(_estate(dpu_busy=True), spec, CHECK)
    assert not result.feasible and result.placements == []
    assert result.reasons[REASON_TASK_TYPE] == 1
    # With the DPU free, it is the one place the work goes (when the task names it).
    free = assign(_estate(), spec, CHECK)
    assert free.feasible == dpu_named and {p.model for p in free.placements} <= {BF3}


def test_a_named_model_of_another_class_still_skips_the_class_check() -> None:
    """`models` may name a device of another class (the explicit class check stays off for
    named models); only the task-type rule applies: general work on a CPU socket is fine."""
    spec = task(type="general", devices={"class": "gpu", "count": 1, "models": [X86]})
    result = assign(_estate(), spec, CHECK)
    assert result.feasible and result.placements[0].model == X86


def test_device_less_work_is_not_subject_to_the_device_rules() -> None:
    """The rules are about devices: work asking for none uses host CPU and memory only."""
    result = assign(_estate(), task(type="offload"), CHECK)
    assert result.feasible and result.placements[0].device_indices == ()


def test_training_on_a_device_too_slow_for_it_is_refused_unless_the_task_vouches() -> None:
    snap = make_snapshot([node("i0", "ascend-310p", 4)], [pool("p310", "ascend-310p", ["i0"])])
    spec = task(type="training", devices={"class": "npu", "count": 1})
    assert assign(snap, spec, CHECK).reasons == {REASON_TASK_TYPE: 1}
    vouched = task(type="training", devices={"class": "npu", "count": 1}, relative_performance={"ascend-310p": 0.5})
    assert assign(snap, vouched, CHECK).feasible


# ------------------------------------------------------------------ preemption


def test_offload_work_never_evicts_gpu_work_it_could_not_use() -> None:
    """Before, the GPU listed in fallback made its low-priority work a candidate victim."""
    gpu_job = RunningTask(
        id="low-gpu",
        tenant="ai-lab/nlp/p",
        priority_rank=Priority.LOW.rank,
        task_type=TaskType.TRAINING,
        allocations=(alloc("g0", "h100", range(8)),),
        started_at=datetime(2025, 1, 1, tzinfo=UTC),
        expected_end=None,
        preemptible=True,
    )
    nodes = [node("g0", H100, 8, stack=CUDA_STACK), node("d0", BF3, 1)]
    snap = make_snapshot(nodes, [pool("h100", H100, ["g0"]), pool("bf3", BF3, ["d0"])], allocations=[*gpu_job.allocations, alloc("d0", "bf3", [0])])
    spec = task(type="offload", devices=OFFLOAD_ON_DPU, fallback=[BF3, "h100"])
    assert find_victims(snap, spec, Priority.HIGH.rank, [gpu_job], CHECK) is None
