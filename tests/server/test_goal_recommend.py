"""Task entry by goal through the API, on the demo inventory (examples/demo: 16 A100 80GB
on two nodes at 18/h, 8 H800 at 32/h, 16 + 8 + 8 Ascend 910B2/910B3, 310P for inference):
the four scenarios of the goal issue, each with sensible, explained options; the sizing
arithmetic is checked against hand-computed figures in tests/catalog/test_sizing.py and
here only where the API adds to it (counts per pool, cost, targets)."""

from __future__ import annotations

import math
from datetime import datetime

import pytest
from fastapi.testclient import TestClient

from tests.server.test_access_api import make_user

BASE = {"tenant": "ai-lab/nlp/llm-sft", "framework": {"name": "pytorch", "version": ">=2.4"}, "command": "python train.py"}


def recommend(api: TestClient, name: str, goal: dict, **extra) -> dict:
    response = api.post("/api/v1/tasks/recommend", json={**BASE, "name": name, "goal": goal, **extra})
    assert response.status_code == 200, response.text
    return response.json()


def by_pool(answer: dict) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for option in answer["options"]:
        out.setdefault(option["pool"], []).append(option)
    return out


def test_8b_lora_finetune_options_meet_the_deadline_and_say_the_cost(demo: TestClient):
    answer = recommend(
        demo,
        "sft-8b",
        {"model": "llama3.1-8b", "method": "lora", "precision": "bf16", "seq_len": 4096, "tokens": 2e9, "deadline": "48h", "max_cost": 5000},
    )
    assert answer["model"] == {"name": "llama3.1-8b", "params_b": 8.03, "shape_from": None}
    pools = by_pool(answer)
    # Torch 2.4 cannot run on the old-CANN pool, MindSpore's pool has no PyTorch; 310P is too slow for training.
    assert set(pools) == {"bj-a100-80g", "bj-h800", "sh-910b2-cann800"}
    excluded = {e["pool"]: e["reason"] for e in answer["excluded"]}
    assert "incompatible software stack" in excluded["sh-910b2-cann80rc1"]
    assert "sh-310p-infer" in excluded
    # On A100: one device is the smallest split (214.5 h, misses 48 h); eight meet it (26.8 h).
    a100 = {o["count"]: o for o in pools["bj-a100-80g"]}
    assert set(a100) == {1, 8}
    assert a100[1]["meets"]["deadline"] is False and a100[8]["meets"]["deadline"] is True
    assert a100[8]["estimated_runtime_s"] == pytest.approx(6 * 8.03e9 * 2e9 / (8 * 312e12 * 0.4), rel=1e-3)
    # cost = devices × 18/h × runtime: the same device-hours either way
    assert a100[8]["cost"] == pytest.approx(8 * 18 * a100[8]["estimated_runtime_s"] / 3600, abs=0.01)
    assert a100[8]["meets"]["max_cost"] is True
    # ranking: every option that meets both targets comes before one that misses the deadline
    meets_all = [all(o["meets"].values()) for o in answer["options"]]
    assert meets_all == sorted(meets_all, reverse=True) and meets_all[0]
    top = answer["options"][0]
    assert top["estimated_completion"] and datetime.fromisoformat(top["estimated_completion"]) <= datetime.fromisoformat(answer["deadline"])
    assert any(r.startswith("deadline: finishes") for r in top["reasons"]) and any("GiB of" in r for r in top["reasons"])
    # the option's task is an ordinary task with the option's devices and fallback order
    task = top["task"]
    assert task["per_worker"]["devices"]["count"] == top["devices_per_worker"] and task["workers"] == top["workers"]
    assert task["fallback"][0] == top["pool"] and "bf16" in task["features"]


def test_submitting_an_option_queues_it_as_an_ordinary_task(demo: TestClient):
    answer = recommend(demo, "sft-8b", {"model": "llama3.1-8b", "method": "lora", "tokens": 2e9, "deadline": "48h"})
    chosen = next(o for o in answer["options"] if o["pool"] == "bj-a100-80g" and o["count"] == 8)
    created = demo.post("/api/v1/tasks", json=chosen["task"])
    assert created.status_code == 201, created.text
    spec = demo.get(f"/api/v1/tasks/{created.json()['id']}").json()["spec"]
    assert spec["per_worker"]["devices"]["count"] == 8 and spec["fallback"][0] == "bj-a100-80g"
    assert spec["goal"]["model"] == "llama3.1-8b"
    datetime.fromisoformat(spec["goal"]["deadline"])  # pinned to a time at submit


def test_a_goal_without_devices_is_sized_at_submit_and_its_deadline_pinned(demo: TestClient):
    doc = {**BASE, "name": "sft-auto", "goal": {"model": "llama3.1-8b", "method": "lora", "tokens": 2e9, "deadline": "48h"}}
    plan = demo.post("/api/v1/tasks/plan", json=doc).json()
    assert plan["task"]["per_worker"]["devices"]["count"] > 0
    created = demo.post("/api/v1/tasks", json=doc)
    assert created.status_code == 201, created.text
    spec = demo.get(f"/api/v1/tasks/{created.json()['id']}").json()["spec"]
    top = recommend(demo, "sft-auto", doc["goal"])["options"][0]
    devices = spec["per_worker"]["devices"]
    assert (devices["class"], devices["count"]) == (top["task"]["per_worker"]["devices"]["class"], top["task"]["per_worker"]["devices"]["count"])
    assert spec["fallback"] == top["task"]["fallback"] and spec["workers"] == top["task"]["workers"]
    assert spec["runtime_estimate"] == top["task"]["runtime_estimate"]
    assert not spec["goal"]["deadline"].endswith("h")  # "48h" became a time


def test_70b_full_finetune_does_not_fit_a_pool_of_16_without_offloading(demo: TestClient):
    answer = recommend(demo, "sft-70b", {"model": "llama3.1-70b", "method": "full-finetune", "tokens": 1e9, "deadline": "7d"})
    excluded = {(e["pool"], e["reason"]) for e in answer["excluded"]}
    # 1052 GiB of states + 10 GiB activations per device: 17 devices -> 3 nodes of 8; the pools have 16 and 8
    assert ("bj-a100-80g", "smallest split needs 24 × nvidia-a100-80g; the pool has 16") in excluded
    assert ("bj-h800", "smallest split needs 24 × nvidia-h800; the pool has 8") in excluded
    # What fits: the optimizer states in host memory, 8 devices; the H800 finishes within the week.
    assert answer["options"] and all(o["sizing"]["variant"] == "offload" for o in answer["options"])
    top = answer["options"][0]
    assert top["model"] == "nvidia-h800" and top["meets"] == {"deadline": True}
    assert any("ZeRO-Offload" in r for r in top["reasons"])
    assert top["task"]["per_worker"]["memory_gb"] >= math.ceil(12 * 70.6e9 / 2**30) or top["task"]["per_worker"]["memory_gb"] == 2048
    a100 = next(o for o in answer["options"] if o["model"] == "nvidia-a100-80g")
    assert a100["meets"]["deadline"] is False and any(r.startswith("deadline: misses it by") for r in a100["reasons"])


def test_72b_inference_service_with_a_latency_target(demo: TestClient):
    answer = recommend(demo, "serve-72b", {"model": "qwen2.5-72b", "method": "inference", "latency_ms": 50}, type="inference")
    pools = by_pool(answer)
    assert {"bj-a100-80g", "bj-h800"} <= set(pools)
    a100 = pools["bj-a100-80g"][0]
    # 135.4 GiB weights + 20 GiB KV: tensor parallel 4 in one NVLink island, 34.1 ms per token
    assert a100["count"] == 4 and a100["sizing"]["parallelism"]["tensor"] == 4 and a100["workers"] == 1
    assert a100["task"]["topology"]["device_island"] is True
    assert a100["meets"] == {"latency": True}
    assert a100["sizing"]["latency_ms"] == pytest.approx((2 * 72.7e9 + 16 * 4096 * 80 * 2048 * 2) / (4 * 2039e9 * 0.6) * 1000, rel=1e-3)
    assert a100["cost"] is None and a100["cost_per_hour"] == pytest.approx(4 * 18)  # a service: an hourly price, no total
    # a stricter target needs all 8 devices of a node
    strict = by_pool(recommend(demo, "serve-72b", {"model": "qwen2.5-72b", "method": "inference", "latency_ms": 20}, type="inference"))
    assert strict["bj-a100-80g"][0]["count"] == 8


def test_batch_inference_with_a_deadline_gets_replicas(demo: TestClient):
    answer = recommend(
        demo, "batch-7b", {"model": "qwen2.5-7b", "method": "batch-inference", "tokens": 5e8, "deadline": "12h"}, type="batch-inference"
    )
    a100 = by_pool(answer)["bj-a100-80g"][0]
    assert a100["count"] == 5 and a100["workers"] == 5 and a100["sizing"]["parallelism"]["replicas"] == 5
    assert a100["meets"]["deadline"] is True
    assert any("5 replicas of 1" in r for r in a100["reasons"])


@pytest.mark.parametrize(
    ("goal", "field", "words"),
    [
        ({"model": "llama3.1-8b"}, "goal.method", "required with a model"),
        ({"model": "lama3.1-8b", "method": "lora"}, "goal.model", "did you mean llama3.1-8b"),
        ({"params": "1e20", "method": "lora"}, "goal.params", "above the limit"),
        ({"model": "llama3.1-8b", "method": "lora", "tokens": "lots"}, "goal.tokens", "is not a count"),
        ({"model": "llama3.1-8b", "method": "lora", "deadline": "2026-12-05T10:00"}, "goal.deadline", "needs its zone"),
        ({"model": "llama3.1-8b", "method": "lora", "deadline": "9999d"}, "goal.deadline", "longer than the limit"),
        ({"model": "llama3-8b", "method": "inference", "seq_len": 32768}, "goal.seq_len", "context of 8192"),
        ({"model": "llama3.1-8b", "method": "teleport"}, "method", "pretrain"),
    ],
)
def test_bad_goals_are_refused_with_the_field_named(demo: TestClient, goal: dict, field: str, words: str):
    for path in ("/api/v1/tasks/recommend", "/api/v1/tasks"):
        response = demo.post(path, json={**BASE, "name": "bad", "goal": goal})
        assert response.status_code == 422, response.text
        message = response.json()["message"]
        assert field in message and words in message


def test_a_huge_model_is_answered_at_once_with_the_reason(demo: TestClient):
    answer = recommend(demo, "huge", {"params": "90T", "method": "inference"})
    assert answer["options"] == []
    assert any("the pool has 16" in e["reason"] for e in answer["excluded"])
    refused = demo.post("/api/v1/tasks", json={**BASE, "name": "huge", "goal": {"params": "90T", "method": "inference"}})
    assert refused.status_code == 422 and "no pool can run it" in refused.json()["message"]


def test_a_member_gets_options_only_for_their_own_tenant(demo: TestClient):
    member = make_user(demo, "erin", ("member", "ai-lab/cv"))
    goal = {"model": "llama3.1-8b", "method": "lora", "tokens": 1e9}
    other = member.post("/api/v1/tasks/recommend", json={**BASE, "name": "x", "goal": goal})
    assert other.status_code == 403
    own = member.post("/api/v1/tasks/recommend", json={**BASE, "tenant": "ai-lab/cv", "name": "x", "goal": goal})
    assert own.status_code == 200 and own.json()["options"]
    assert all(o["task"]["tenant"] == "ai-lab/cv" for o in own.json()["options"])


def test_a_template_presets_the_goal_and_its_device_counts_give_way(demo: TestClient):
    template = {
        "kind": "TaskTemplate",
        "name": "llm-lora",
        "type": "training",
        "defaults": {
            "framework": {"name": "pytorch", "version": ">=2.4"},
            "goal": {"method": "lora", "precision": "bf16", "seq_len": 2048},
            "per_worker": {"devices": {"class": "gpu", "count": 8}, "cpu": 12, "memory_gb": 96},
        },
    }
    assert demo.post("/api/v1/apply", json={"documents": [template]}).status_code == 200
    doc = {"tenant": BASE["tenant"], "name": "from-template", "template": "llm-lora", "goal": {"model": "llama3.1-8b", "tokens": 1e9}}
    answer = demo.post("/api/v1/tasks/recommend", json=doc).json()
    assert answer["goal"]["method"] == "lora" and answer["goal"]["seq_len"] == 2048 and answer["goal"]["model"] == "llama3.1-8b"
    counts = {o["count"] for o in answer["options"]}
    assert 1 in counts  # the template's 8 per worker gave way to the sizing
    one = next(o for o in answer["options"] if o["count"] == 1)
    assert one["task"]["per_worker"]["cpu"] == 12 and one["task"]["per_worker"]["memory_gb"] == 96  # the template's host shape stays
    created = demo.post("/api/v1/tasks", json=doc)
    assert created.status_code == 201, created.text
    spec = demo.get(f"/api/v1/tasks/{created.json()['id']}").json()["spec"]
    assert spec["template"] == "llm-lora" and spec["goal"]["seq_len"] == 2048


def test_identical_pools_are_one_option_with_each_other_as_fallback(demo: TestClient):
    docs = [{"kind": "Cluster", "name": "bj-more", "backend": "local", "zone": "bj"}]
    for i in range(3):
        node = {"kind": "Node", "name": f"more-{i}", "cluster": "bj-more", "cpu_cores": 64, "memory_gb": 1024}
        node |= {
            "devices": [{"model": "nvidia-l40s", "count": 4}],
            "stack": {"driver": "550.54.15", "runtime": {"name": "cuda", "version": "12.4"}, "frameworks": {"pytorch": "2.4.1"}},
        }
        docs += [
            node,
            {"kind": "Pool", "name": f"more-l40s-{i}", "cluster": "bj-more", "model": "nvidia-l40s", "nodes": [f"more-{i}"], "price_per_hour": 6.0},
        ]
    assert demo.post("/api/v1/apply", json={"documents": docs}).status_code == 200
    answer = recommend(demo, "sft-8b", {"model": "llama3.1-8b", "method": "lora", "tokens": 2e9})
    l40s = [o for o in answer["options"] if o["model"] == "nvidia-l40s"]
    assert len(l40s) == 1  # one split (the smallest; no deadline), planned once for the three pools
    assert l40s[0]["pool"] == "more-l40s-0"
    assert l40s[0]["task"]["fallback"][:3] == ["more-l40s-0", "more-l40s-1", "more-l40s-2"]
