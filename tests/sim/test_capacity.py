"""Capacity planning: changing the inventory, and baseline vs changed runs of a trace."""

from __future__ import annotations

import json

import pytest

from hetpool.catalog.compat import CompatibilityKB
from hetpool.catalog.devices import DeviceCatalog
from hetpool.cli.files import read_documents
from hetpool.core.errors import SpecError
from hetpool.core.specs import parse_documents, parse_spec
from hetpool.sim.capacity import change_inventory, device_counts, parse_change, plan_capacity, resolve_model
from hetpool.sim.trace import TraceTask
from tests.conftest import DEMO_DIR

MODELS = {m.name: m for m in DeviceCatalog.builtin().all()}


@pytest.fixture(scope="module")
def demo() -> dict[str, list]:
    documents, sources = read_documents([str(DEMO_DIR)])
    by_kind: dict[str, list] = {}
    for spec in parse_documents(list(zip(sources, documents, strict=True))):
        by_kind.setdefault(spec.kind, []).append(spec)
    return by_kind


def npu_trace(n: int = 12, every_s: float = 600.0, hours: float = 2.0) -> list[TraceTask]:
    """`n` PyTorch 2.4 jobs of 8 × 910B2 each (only the CANN 8.0.0 pool runs them)."""
    tasks = []
    for i in range(n):
        spec = parse_spec(
            {
                "kind": "Task",
                "name": f"sft-{i}",
                "tenant": "ai-lab/nlp/llm-sft",
                "type": "training",
                "framework": {"name": "pytorch", "version": ">=2.4"},
                "per_worker": {"devices": {"class": "npu", "models": ["ascend-910b2"], "count": 8}, "cpu": 16, "memory_gb": 64},
                "runtime_estimate": f"{hours}h",
            }
        )
        tasks.append(TraceTask(f"sft-{i}", i * every_s, spec, hours * 3600))
    return tasks


@pytest.mark.parametrize("text", ["16x ascend-910b2", "16 x ascend-910b2", "16*ascend-910b2", " 16X ascend-910b2 ", "16×ascend-910b2"])
def test_parse_change_accepts_the_usual_spellings(text: str) -> None:
    assert parse_change(text) == (16, "ascend-910b2")
    assert parse_change("8x Huawei Ascend 910B2") == (8, "Huawei Ascend 910B2")


@pytest.mark.parametrize("text", ["16 ascend-910b2", "ascend-910b2", "0x ascend-910b2", "x16 ascend", "", "16x"])
def test_parse_change_rejects_other_text_naming_the_flag(text: str) -> None:
    with pytest.raises(SpecError, match=r"--remove .*expected COUNTx MODEL"):
        parse_change(text, "--remove")


def test_models_resolve_by_id_display_name_or_alias() -> None:
    assert resolve_model("ascend-910b2", MODELS) == "ascend-910b2"
    assert resolve_model("Huawei Ascend 910B2", MODELS) == "ascend-910b2"
    assert resolve_model("NVIDIA A100-SXM4-80GB", MODELS) == "nvidia-a100-80g"
    with pytest.raises(SpecError, match=r"--add 'ascnd-910b2': unknown device model; did you mean ascend-910b2"):
        resolve_model("ascnd-910b2", MODELS, "--add")


def test_add_clones_the_node_shape_of_a_pool_of_that_model(demo: dict) -> None:
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [(16, "Huawei Ascend 910B2")], [])
    before, after = device_counts(demo["Node"], demo["Pool"]), device_counts(nodes, pools)
    assert after["ascend-910b2"] == before["ascend-910b2"] + 16
    assert {k: v for k, v in after.items() if k != "ascend-910b2"} == {k: v for k, v in before.items() if k != "ascend-910b2"}
    pool = next(p for p in pools if p.name == "sh-910b2-cann800")
    assert pool.nodes == ["npu-b01", "npu-b02", "ascend-910b2-plan-1", "ascend-910b2-plan-2"]
    template = next(n for n in demo["Node"] if n.name == "npu-b01")
    for node in nodes[-2:]:
        assert (node.cluster, node.cpu_cores, node.memory_gb, node.arch, node.stack) == ("sh-ascend", 192, 1536, "aarch64", template.stack)
        assert [(g.model, g.count) for g in node.devices] == [("ascend-910b2", 8)]
    # the inputs are untouched
    assert len(demo["Node"]) == 12 and next(p for p in demo["Pool"] if p.name == "sh-910b2-cann800").nodes == ["npu-b01", "npu-b02"]


def test_add_a_model_without_a_pool_makes_a_plan_pool(demo: dict) -> None:
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [(12, "nvidia-h100")], [])
    pool = pools[-1]
    assert (pool.name, pool.model, pool.cluster) == ("plan-nvidia-h100", "nvidia-h100", "bj-train")  # next to the other CUDA GPUs
    added = [n for n in nodes if n.name in pool.nodes]
    assert [g.count for n in added for g in n.devices] == [8, 4]
    assert added[0].stack.runtime.name == "cuda"
    assert device_counts(nodes, pools)["nvidia-h100"] == 12


def test_remove_takes_whole_nodes_from_the_end_of_the_largest_pool(demo: dict) -> None:
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [], [(8, "nvidia-a100-80g")])
    assert next(p for p in pools if p.name == "bj-a100-80g").nodes == ["gpu-a01"]
    assert "gpu-a02" not in {n.name for n in nodes}
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [], [(10, "nvidia-a100-80g")])  # 2 whole nodes
    assert "bj-a100-80g" not in {p.name for p in pools} and "nvidia-a100-80g" not in device_counts(nodes, pools)
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [], [(16, "ascend-910b2")])
    assert device_counts(nodes, pools)["ascend-910b2"] == 8
    assert next(p for p in pools if p.name == "sh-910b2-cann800").nodes == ["npu-b01"]  # 16 → 8, then the tie goes to the later pool
    with pytest.raises(SpecError, match=r"--remove 17x nvidia-a100-80g: the inventory has only 16"):
        change_inventory(demo["Node"], demo["Pool"], MODELS, [], [(17, "nvidia-a100-80g")])


def test_add_and_remove_of_the_same_model_clone_the_original_shape(demo: dict) -> None:
    nodes, pools = change_inventory(demo["Node"], demo["Pool"], MODELS, [(8, "nvidia-a100-80g")], [(16, "nvidia-a100-80g")])
    assert device_counts(nodes, pools)["nvidia-a100-80g"] == 8
    assert next(p for p in pools if p.model == "nvidia-a100-80g").name == "plan-nvidia-a100-80g"


def test_more_capacity_lowers_the_wait_and_less_raises_it(demo: dict) -> None:
    args = (demo["Cluster"], demo["Node"], demo["Pool"], MODELS, CompatibilityKB.builtin().check, npu_trace())
    more = plan_capacity(*args, [(16, "ascend-910b2")], [])
    less = plan_capacity(*args, [], [(8, "ascend-910b2")])
    same = {k for k in more["baseline"] if k != "scheduler_seconds"}  # wall-clock time of run_cycle varies
    assert {k: more["baseline"][k] for k in same} == {k: less["baseline"][k] for k in same}
    base_wait = more["baseline"]["wait_hours"]["avg"]
    assert more["changed"]["wait_hours"]["avg"] < base_wait < less["changed"]["wait_hours"]["avg"]
    assert more["delta"]["avg_wait_hours"]["delta"] < 0 < less["delta"]["avg_wait_hours"]["delta"]
    assert more["delta"]["p90_wait_hours"]["changed"] == more["changed"]["wait_hours"]["p90"]
    assert more["changes"]["devices"]["changed"]["ascend-910b2"] == 40
    assert more["changes"]["added_nodes"] == ["ascend-910b2-plan-1", "ascend-910b2-plan-2"]
    assert less["changes"]["removed_nodes"] == ["npu-b02"]
    assert set(more["delta"]["cost_per_team"]) == {"ai-lab/nlp"}  # org/team/project rolls up to the team
    assert more.baseline_result.pool_devices["sh-910b2-cann800"] == 16
    assert more.changed_result.pool_devices["sh-910b2-cann800"] == 32
    json.dumps(more)  # the report is plain JSON


def test_recommendations_flag_saturated_idle_and_over_quota(demo: dict) -> None:
    args = (demo["Cluster"], demo["Node"], demo["Pool"], MODELS, CompatibilityKB.builtin().check, npu_trace())
    progress = []
    report = plan_capacity(*args, [(16, "ascend-910b2")], [], progress=lambda *a: progress.append(a))
    kinds = {(r["kind"], r["name"]) for r in report["recommendations"]}
    assert ("saturated-pool", "sh-910b2-cann800") in kinds
    assert ("idle-pool", "bj-a100-80g") in kinds
    assert ("idle-pool", "sh-910b2-cann800") not in kinds
    assert not any(kind == "team-over-quota" for kind, _ in kinds)  # no quotas given
    saturated = next(r for r in report["recommendations"] if r["kind"] == "saturated-pool")
    assert saturated["metric"] == report["baseline"]["per_pool"]["sh-910b2-cann800"]["wait_hours"]["p90"] > 1.0
    assert {p[0] for p in progress} == {"baseline", "changed"} and progress[-1][2] == progress[-1][3] == 12
    relaxed = plan_capacity(*args, [], [], wait_target_h=100, idle_below=0.0, quotas={"ai-lab/nlp": 4, "infra": 1})
    assert [(r["kind"], r["name"]) for r in relaxed["recommendations"]] == [("team-over-quota", "ai-lab/nlp")]
    assert 10 < relaxed["recommendations"][0]["metric"] <= 16  # the trace keeps the 16-device pool nearly full
