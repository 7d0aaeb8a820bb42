"""The compatibility tables through the API: a three-valued check with the rows it rests on,
the matrices, the rows with their sources; operators' CompatibilityRule objects changing
what plan decides (and tenants unable to write them); the unknown policy."""

from __future__ import annotations

from fastapi.testclient import TestClient
from sqlalchemy import select

from hetpool.server.db.models import InventoryObjectRow
from tests.server.helpers import example_task
from tests.server.test_access_api import make_user

NPU_TASK = {**example_task("pytorch24-npu.yaml"), "image": "registry.local/pt:2.4-npu"}  # PyTorch 2.4 on the 910B2 pools
OLD_CANN_POOL = "sh-910b2-cann80rc1"  # CANN 8.0.RC1: torch_npu for PyTorch 2.2 and older only
SITE_RULE = {
    "kind": "CompatibilityRule",
    "name": "site-cann-80rc1-torch24",
    "description": "our own run of torch_npu 2.4.0 on CANN 8.0.RC1",
    "table": "torch-npu",
    "source": "site validation run VR-2026-117",
    "checked": "2026-11-28",
    "rows": [{"cann": "8.0.RC1", "torch_npu": ["2.4.0", "2.2.0", "2.1.0.post4"]}],
}


def check(api: TestClient, device: str, stack: dict | None, name: str, version: str = "", has_image: bool = True) -> dict:
    body = {"device": device, "framework": {"name": name, "version": version}, "has_image": has_image, **({"stack": stack} if stack else {})}
    response = api.post("/api/v1/compat/check", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_check_is_three_valued_and_names_the_rows_it_rests_on(demo: TestClient) -> None:
    ok = check(demo, "nvidia-a100-80g", {"driver": "550.54.15"}, "pytorch", "2.4")
    assert ok["status"] == "compatible" and ok["ok"]
    assert any(r.startswith("pytorch 2.4") and "RELEASE.md" in r for r in ok["rows"]), ok["rows"]
    assert any(r.startswith("cuda-driver 12.4") for r in ok["rows"])
    # A driver older than every CUDA build of PyTorch 2.8: incompatible, saying which builds exist.
    old = check(demo, "nvidia-a100-80g", {"driver": "470.82.01"}, "pytorch", "2.8")
    assert old["status"] == "incompatible" and not old["ok"] and "12.6" in old["detail"]
    # A CANN release the tables do not know: unknown, with the nearest known rows, blocked by default.
    unknown = check(demo, "ascend-910b2", {"runtime": {"name": "cann", "version": "8.4.0"}}, "pytorch", "2.7")
    assert unknown["status"] == "unknown" and not unknown["ok"] and unknown["policy"] == "block"
    assert len(unknown["nearest"]) == 2 and all("checked" in n for n in unknown["nearest"])
    # A framework nobody knows is unknown too, with close names.
    typo = check(demo, "nvidia-a100-80g", {"driver": "550.54.15"}, "pytorh")
    assert typo["status"] == "unknown" and "pytorch" in typo["detail"]
    # The device's generation counts: CUDA 13 builds no longer target Volta.
    volta = check(demo, "nvidia-v100-32g", {"driver": "580.65.06", "frameworks": {"torch": "2.9.0+cu130"}}, "pytorch", "2.9", has_image=False)
    assert volta["status"] == "incompatible" and "sm_70" in volta["detail"]
    # vLLM named as the framework on a GPU: PyTorch plus the vLLM extra, pinned torch and all.
    vllm = check(demo, "nvidia-h100", {"driver": "570.124.06"}, "vllm", "==0.8.5")
    assert vllm["status"] == "compatible" and any("vllm 0.8" in r for r in vllm["rows"]), vllm
    # vLLM's newest wheels are CUDA 13 builds for sm_75 and newer: not on a V100.
    v100 = check(demo, "nvidia-v100-32g", {"driver": "580.65.06"}, "vllm", "==0.33.0")
    assert v100["status"] == "incompatible" and "sm_75" in v100["detail"], v100


def test_matrices_answer_from_the_same_rows(demo: TestClient) -> None:
    by_device = demo.get("/api/v1/compat/matrix", params={"device": "ascend-910b2"})
    assert by_device.status_code == 200, by_device.text
    rows = {r["runtime"]: r for r in by_device.json()["by_runtime"]}
    assert rows["CANN 8.0.0"]["supported"] and "2.4.0" in rows["CANN 8.0.0"]["frameworks"]["pytorch"]
    assert "2.4.0" not in rows["CANN 8.0.RC1"]["frameworks"].get("pytorch", [])
    mi300x = {r["runtime"]: r for r in demo.get("/api/v1/compat/matrix", params={"device": "amd-mi300x"}).json()["by_runtime"]}
    assert not mi300x["ROCm 5.7"]["supported"] and "predates gfx942" in mi300x["ROCm 5.7"]["why_not"]  # MI300X support starts at 6.0.0
    assert mi300x["ROCm 6.0"]["supported"] and "2.3.0" in mi300x["ROCm 6.0"]["frameworks"]["pytorch"]
    by_framework = demo.get("/api/v1/compat/matrix", params={"framework": "pytorch==2.8.0"}).json()["by_device"]
    found = {r["device"]: r for r in by_framework}
    assert found["nvidia-a100-80g"]["status"] == "compatible" and found["nvidia-a100-80g"]["releases"][0].startswith("CUDA 12.")
    assert found["ascend-910b2"]["status"] == "compatible" and all(r.startswith("CANN ") for r in found["ascend-910b2"]["releases"])
    assert found["hygon-k100"]["status"] == "unknown"  # no table of Hygon's PyTorch builds
    bad = demo.get("/api/v1/compat/matrix", params={"device": "ascend-910b2", "framework": "pytorch"})
    assert bad.status_code == 422
    unknown = demo.get("/api/v1/compat/matrix", params={"framework": "caffe==1.0"})
    assert unknown.status_code == 422 and "caffe" in unknown.json()["message"]


def test_rows_carry_their_sources_and_an_unknown_table_is_refused(demo: TestClient) -> None:
    rows = demo.get("/api/v1/compat/rows", params={"table": "torch-npu"}).json()
    assert rows and all(r["source"] and r["checked"] and r["origin"].startswith("data/compat/") for r in rows)
    assert demo.get("/api/v1/compat/rows", params={"table": "nope"}).status_code == 422


def test_an_operators_rule_changes_the_plan_and_shows_where_it_came_from(demo: TestClient) -> None:
    devices = {k: v for k, v in NPU_TASK["per_worker"]["devices"].items() if k != "models"}
    pinned = {**NPU_TASK, "fallback": [], "any_of": [OLD_CANN_POOL], "per_worker": {**NPU_TASK["per_worker"], "devices": devices}}
    before = demo.post(
        "/api/v1/compat/check",
        json={
            "device": "ascend-910b2",
            "stack": {"runtime": {"name": "cann", "version": "8.0.RC1"}},
            "framework": {"name": "pytorch", "version": "2.4"},
        },
    ).json()
    assert before["status"] == "incompatible"
    plan_before = demo.post("/api/v1/tasks/plan", json=pinned).json()
    assert not plan_before["feasible"] and any(r.startswith("incompatible software stack: CANN") for r in plan_before["reasons"]), plan_before
    applied = demo.post("/api/v1/apply", json={"documents": [SITE_RULE]})
    assert applied.status_code == 200, applied.text
    after = demo.post(
        "/api/v1/compat/check",
        json={
            "device": "ascend-910b2",
            "stack": {"runtime": {"name": "cann", "version": "8.0.RC1"}},
            "framework": {"name": "pytorch", "version": "2.4"},
        },
    ).json()
    assert after["status"] == "compatible", after
    assert any("site validation run VR-2026-117" in r and "from CompatibilityRule site-cann-80rc1-torch24" in r for r in after["rows"])
    mine = demo.get("/api/v1/compat/rows", params={"origin": "CompatibilityRule site-cann-80rc1-torch24"}).json()
    assert [r["values"]["cann"] for r in mine] == ["8.0.RC1"] and mine[0]["checked"] == "2026-11-28"
    pool_check = demo.post(
        "/api/v1/catalog/compat-check", json={"pool": OLD_CANN_POOL, "framework": {"name": "pytorch", "version": "2.4"}, "has_image": True}
    ).json()
    assert pool_check["ok"], pool_check
    plan_after = demo.post("/api/v1/tasks/plan", json=pinned).json()
    assert plan_after["feasible"] and plan_after["placements"][0]["pool"] == OLD_CANN_POOL, plan_after
    # Deleting the rule puts the built-in row back.
    assert demo.delete("/api/v1/objects/CompatibilityRule/site-cann-80rc1-torch24").status_code in (200, 204)
    again = demo.post(
        "/api/v1/catalog/compat-check", json={"pool": OLD_CANN_POOL, "framework": {"name": "pytorch", "version": "2.4"}, "has_image": True}
    ).json()
    assert not again["ok"]


def test_a_bad_rule_is_refused_naming_the_row_and_column(demo: TestClient) -> None:
    for rows, words in (
        ([{"cann": "8.0.RC1", "torch": ["2.4.0"]}], "unknown column 'torch'"),
        ([{"cann": 8.1, "torch_npu": ["2.4.0"]}], "quote version numbers"),
        ([{"cann": "8.0.RC1"}], "torch_npu is required"),
    ):
        response = demo.post("/api/v1/apply", json={"documents": [{**SITE_RULE, "rows": rows}]})
        assert response.status_code == 422, response.text
        assert words in response.text and "rows[0]" in response.text
    no_source = {k: v for k, v in SITE_RULE.items() if k != "source"}
    assert "source is required" in demo.post("/api/v1/apply", json={"documents": [no_source]}).text
    wrong_table = demo.post("/api/v1/apply", json={"documents": [{**SITE_RULE, "table": "torch_npu"}]})
    assert wrong_table.status_code == 422 and "allowed:" in wrong_table.text and "torch-npu" in wrong_table.text
    bad_check = {**SITE_RULE, "table": "frameworks", "rows": [{"framework": "pytorch", "runtime": "cann", "check": "yes"}]}
    assert "check must be one of" in demo.post("/api/v1/apply", json={"documents": [bad_check]}).text


def test_a_tenant_cannot_write_rules_that_make_its_stack_compatible(demo: TestClient) -> None:
    member = make_user(demo, "rule-writer", ("tenant-admin", "ai-lab/nlp"))
    response = member.post("/api/v1/apply", json={"documents": [SITE_RULE]})
    assert response.status_code == 403, response.text
    assert demo.get("/api/v1/compat/rows", params={"origin": f"CompatibilityRule {SITE_RULE['name']}"}).json() == []
    # Reading the tables is fine for them: the same public facts for everyone.
    assert member.get("/api/v1/compat/rows", params={"table": "cuda-driver"}).status_code == 200


def test_the_unknown_policy_decides_whether_unknown_blocks(ctx, demo: TestClient) -> None:
    body = {"device": "hygon-k100", "stack": {"runtime": {"name": "dtk", "version": "24.04"}}, "framework": {"name": "pytorch", "version": "2.3"}}
    blocked = demo.post("/api/v1/compat/check", json=body).json()
    assert blocked["status"] == "unknown" and not blocked["ok"]
    ctx.settings.compat_unknown = "allow"
    ctx.__dict__.pop("base_compat", None)
    ctx._compat_with_rules = ((), None)
    allowed = demo.post("/api/v1/compat/check", json=body).json()
    assert allowed["status"] == "unknown" and allowed["ok"] and allowed["policy"] == "allow"
    assert any("allowed by the compat unknown policy" in n for n in allowed["notes"])


DCU = [
    {
        "kind": "Node",
        "name": "dcu-01",
        "cluster": "sh-ascend",
        "cpu_cores": 64,
        "memory_gb": 512,
        "devices": [{"model": "hygon-k100", "count": 8}],
        "stack": {"driver": "6.2.26", "runtime": {"name": "dtk", "version": "24.04"}},
    },
    {"kind": "Pool", "name": "sh-dcu-k100", "cluster": "sh-ascend", "model": "hygon-k100", "nodes": ["dcu-01"], "price_per_hour": 6.0},
]
DCU_TASK = {
    "name": "pt-on-dcu",
    "tenant": "ai-lab/nlp/llm-sft",
    "image": "registry.local/pt:2.3-dtk",
    "command": "python train.py",
    "framework": {"name": "pytorch", "version": "2.3"},
    "per_worker": {"devices": {"class": "gpu", "models": ["hygon-k100"], "count": 8}},
}


def test_plan_says_an_unknown_verdict_apart_and_the_policy_can_let_it_through(ctx, demo: TestClient) -> None:
    assert demo.post("/api/v1/apply", json={"documents": DCU}).status_code == 200
    blocked = demo.post("/api/v1/tasks/plan", json=DCU_TASK).json()
    assert "feasible" in blocked, blocked
    assert not blocked["feasible"]
    assert any(r.startswith("software compatibility unknown: no version table for this runtime") for r in blocked["reasons"]), blocked["reasons"]
    assert not any(r.startswith("incompatible software stack") for r in blocked["reasons"])
    ctx.settings.compat_unknown = "allow"
    ctx.__dict__.pop("base_compat", None)
    ctx._compat_with_rules = ((), None)
    allowed = demo.post("/api/v1/tasks/plan", json=DCU_TASK).json()
    assert allowed["feasible"] and allowed["placements"][0]["pool"] == "sh-dcu-k100", allowed


def test_a_rule_broken_in_the_database_is_left_out_and_stops_nothing(ctx, demo: TestClient) -> None:
    other = {**SITE_RULE, "name": "site-cann-85", "rows": [{"cann": "8.4.0", "torch_npu": ["2.7.1"]}]}
    assert demo.post("/api/v1/apply", json={"documents": [SITE_RULE, other]}).status_code == 200
    with ctx.db.transaction() as session:  # what a hand edit (or a row stored before validation existed) leaves behind
        for row in session.execute(select(InventoryObjectRow).where(InventoryObjectRow.name == SITE_RULE["name"])).scalars():
            row.spec = {**row.spec, "rows": [{"cann": "8.0.RC1", "torch": ["2.4.0"]}]}
    query = {
        "device": "ascend-910b2",
        "stack": {"runtime": {"name": "cann", "version": "8.0.RC1"}},
        "framework": {"name": "pytorch", "version": "2.4"},
    }
    assert demo.post("/api/v1/compat/check", json=query).json()["status"] == "incompatible"  # the broken rule is out
    newer = {**query, "stack": {"runtime": {"name": "cann", "version": "8.4.0"}}, "framework": {"name": "pytorch", "version": "2.7"}}
    assert demo.post("/api/v1/compat/check", json=newer).json()["status"] == "compatible"  # the good one still counts
    assert demo.post("/api/v1/tasks/plan", json=NPU_TASK).json()["feasible"]  # and planning goes on
