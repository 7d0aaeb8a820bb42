"""Approval rules: each rule alone, policies by tenant, and how a verdict is put together."""

from __future__ import annotations

from hetpool.core.governance import ApprovalPolicySpec
from hetpool.governance.approvals import (
    ApprovalContext,
    BudgetExceeded,
    Environment,
    MaxDevices,
    MaxRuntime,
    OverQuota,
    QuotaChange,
    ReservedPool,
    evaluate,
    needed_facts,
    policies_for,
    reserved_pools_for,
    rules_of,
)
from tests.scheduling.factories import CUDA_STACK, compat_check, make_snapshot, node, pool, task


def policy(name: str = "p", **fields) -> ApprovalPolicySpec:
    return ApprovalPolicySpec.model_validate({"kind": "ApprovalPolicy", "name": name, **fields})


def ctx(**fields) -> ApprovalContext:
    return ApprovalContext(**{"kind": "task", "tenant": "ai-lab/nlp/p", "env": "dev", **fields})


def test_each_rule_gives_its_reason_or_nothing() -> None:
    assert OverQuota().check(ctx()) is None
    assert OverQuota().check(ctx(over_quota="gpu: 16 of 8")) == "over quota: gpu: 16 of 8"
    assert ReservedPool().check(ctx(reserved_pools=("h100-vip",))) == "may run on reserved pool(s) h100-vip"
    assert MaxDevices(8).check(ctx(devices=8)) is None
    assert "16 devices" in MaxDevices(8).check(ctx(devices=16))
    assert MaxRuntime("24h").check(ctx(runtime_s=None)) is None
    assert MaxRuntime("24h").check(ctx(runtime_s=24 * 3600)) is None
    assert MaxRuntime("24h").check(ctx(runtime_s=48 * 3600)) == "may run 2d; longer than 24h needs approval"
    assert Environment(frozenset({"prod"})).check(ctx(env="dev")) is None
    assert Environment(frozenset({"prod"})).check(ctx(env="prod")) == "environment prod needs approval"
    assert BudgetExceeded().check(ctx(budget="spent 120 of 100 CNY")) == "budget exceeded: spent 120 of 100 CNY"
    assert QuotaChange().check(ApprovalContext(kind="quota", tenant="ai-lab", by_platform_admin=True)) is None
    assert QuotaChange().check(ApprovalContext(kind="quota", tenant="ai-lab"))


def test_a_policy_becomes_one_rule_per_threshold_it_sets() -> None:
    names = [r.name for r in rules_of(policy(max_devices=8, environments=["prod"], max_runtime="2d", reserved_pools=True))]
    assert names == ["over_quota", "reserved_pool", "max_devices", "max_runtime", "environment", "budget_exceeded", "quota_change"]
    bare = policy(over_quota=False, budget_exceeded=False, quota_changes=False)
    assert rules_of(bare) == []
    assert needed_facts([policy()], "task") == {"over_quota", "budget"}
    assert needed_facts([policy(reserved_pools=True, over_quota=False, budget_exceeded=False)], "task") == {"reserved_pools"}
    assert needed_facts([policy()], "quota") == set()


def test_policies_apply_to_their_tenant_subtree() -> None:
    everyone, lab, nlp, infra = policy("all"), policy("lab", tenant="ai-lab"), policy("nlp", tenant="ai-lab/nlp"), policy("infra", tenant="infra")
    assert [p.name for p in policies_for([everyone, lab, nlp, infra], "ai-lab/nlp/p")] == ["all", "lab", "nlp"]
    assert [p.name for p in policies_for([lab, nlp], "ai-lab/cv")] == ["lab"]
    assert policies_for([policy("x", tenant="ai-lab/nl")], "ai-lab/nlp") == []  # a prefix is not a parent


def test_evaluate_collects_reasons_approvers_and_the_shortest_expiry() -> None:
    lab = policy("lab", tenant="ai-lab", max_devices=4, approvers=["carol"], expire_after="48h")
    nlp = policy("nlp", tenant="ai-lab/nlp", environments=["prod"], approvers=["dave", "carol"], expire_after="2h")
    quiet = policy("quiet", tenant="ai-lab", over_quota=False, max_devices=100, approvers=["erin"], expire_after="1h")
    verdict = evaluate([lab, nlp, quiet], ctx(devices=8, env="prod", over_quota="gpu 8 > 4"))
    assert verdict.needed
    assert [(r.rule, r.policy) for r in verdict.reasons] == [("over_quota", "lab"), ("max_devices", "lab"), ("environment", "nlp")]
    assert verdict.policies == ("lab", "nlp")  # quiet did not trip: its approvers and expiry do not count
    assert verdict.approvers == ("carol", "dave")
    assert verdict.expire_after == "2h"
    assert "over quota" in verdict.summary() and "environment prod" in verdict.summary()
    assert not evaluate([lab, nlp], ctx(devices=1)).needed
    assert not evaluate([lab], ctx(tenant="infra/data", devices=64)).needed


def test_task_rules_do_not_look_at_quota_changes_and_back() -> None:
    p = policy(max_devices=0, environments=["dev"])
    assert not evaluate([p], ApprovalContext(kind="quota", tenant="ai-lab/nlp/p", by_platform_admin=True)).needed
    verdict = evaluate([p], ApprovalContext(kind="quota", tenant="ai-lab/nlp/p"))
    assert [r.rule for r in verdict.reasons] == ["quota_change"]
    assert "quota_change" not in {r.rule for r in evaluate([p], ctx(devices=1)).reasons}


def test_context_for_a_task_counts_all_workers_and_the_longer_runtime() -> None:
    spec = task(devices={"class": "gpu", "count": 4}, workers=3, runtime_estimate="2h", max_runtime="30h", env="prod")
    context = ApprovalContext.for_task(spec, over_quota="x")
    assert (context.devices, context.runtime_s, context.env, context.over_quota) == (12, 30 * 3600, "prod", "x")
    assert ApprovalContext.for_task(task()).devices == 0 and ApprovalContext.for_task(task()).runtime_s is None


def test_reserved_pools_are_those_the_task_may_actually_use() -> None:
    nodes = [
        node("g0", "nvidia-h100", stack=CUDA_STACK),
        node("g1", "nvidia-h100", stack=CUDA_STACK),
        node("a0", "nvidia-a100-80g", stack=CUDA_STACK),
    ]
    pools = [
        pool("h100-lab", "nvidia-h100", ["g0"], reserved_for={"tenants": ["ai-lab"]}),
        pool("h100-vip", "nvidia-h100", ["g1"], reserved_for={"min_priority": "high"}),
        pool("a100", "nvidia-a100-80g", ["a0"]),
    ]
    snap = make_snapshot(nodes, pools)
    gpu = {"class": "gpu", "count": 1}
    assert reserved_pools_for(snap, task(devices=gpu), compat_check()) == ("h100-lab",)
    assert reserved_pools_for(snap, task(devices=gpu, priority="high"), compat_check()) == ("h100-lab", "h100-vip")
    assert reserved_pools_for(snap, task(devices=gpu, tenant="infra/data"), compat_check()) == ()
    assert reserved_pools_for(snap, task(devices=gpu), compat_check(), allowed_pools={"a100"}) == ()
    assert reserved_pools_for(snap, task(devices={**gpu, "models": ["nvidia-a100-80g"]}), compat_check()) == ()
