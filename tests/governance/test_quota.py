"""The quota book on its own: charges per resource kind, borrowing within limits, the
parent's cap, lending limits, normalised units and reclaim eligibility."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.specs import parse_spec
from hetpool.core.tasks import TaskSpec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.quota_view import Held

MODELS = {m.name: m for m in DeviceCatalog.builtin()}
POOLS = {"a100": "nvidia-a100-80g", "910b": "ascend-910b3"}


def quota(name: str, tenant: str, *limits: dict, **fields) -> object:
    return parse_spec({"kind": "Quota", "name": name, "tenant": tenant, "limits": list(limits), **fields})


def task(tenant: str, type_: str = "training", env: str = "dev") -> TaskSpec:
    return TaskSpec.model_validate({"name": "t", "tenant": tenant, "type": type_, "env": env})


def a100(n: float) -> list[Held]:
    return [Held("a100", "nvidia-a100-80g", n, 8, 64)]


def book(*quotas) -> QuotaBook:
    return QuotaBook(quotas, MODELS, POOLS)


def test_resource_kinds_are_charged_as_named() -> None:
    q = quota(
        "q",
        "org",
        {"resource": "nvidia-a100-80g", "nominal": 8},
        {"resource": "a100", "nominal": 8},
        {"resource": "gpu", "nominal": 8},
        {"resource": "npu", "nominal": 8},
        {"resource": "a100-equivalent", "nominal": 100},
        {"resource": "cpu-cores", "nominal": 100},
        {"resource": "memory-gb", "nominal": 1000},
    )
    b = book(q)
    b.charge("t1", task("org/x"), a100(2) + [Held("910b", "ascend-910b3", 4, 1, 1)])
    used = {r["resource"]: r["used"] for r in b.usage()}
    perf = MODELS["ascend-910b3"].perf_for("training")
    assert used == {
        "nvidia-a100-80g": 2,
        "a100": 2,
        "gpu": 2,
        "npu": 4,
        "a100-equivalent": round(2 * MODELS["nvidia-a100-80g"].perf_for("training") + 4 * perf, 6),
        "cpu-cores": 9,
        "memory-gb": 65,
    }


def test_environment_and_type_select_the_quota() -> None:
    prod_training = quota("p", "org", {"resource": "gpu", "nominal": 1}, env="prod", type="training")
    b = book(prod_training)
    assert b.check(task("org/a", env="dev"), a100(4)).ok  # no quota applies to dev work
    assert not b.check(task("org/a", env="prod"), a100(4)).ok
    assert b.check(task("org/a", type_="inference", env="prod"), a100(4)).ok


def test_borrowing_limits_lending_limits_and_the_parent_cap() -> None:
    parent = quota("org", "org", {"resource": "gpu", "nominal": 10})
    a = quota("a", "org/a", {"resource": "gpu", "nominal": 4, "lending_limit": 1})
    b = quota("b", "org/b", {"resource": "gpu", "nominal": 4, "borrowing_limit": 3})
    c = quota("c", "org/c", {"resource": "gpu", "nominal": 2})
    qb = book(parent, a, b, c)
    # b may borrow a's 1 (lending limit) and c's 2.
    verdict = qb.check(task("org/b"), a100(7))
    assert verdict.ok and verdict.borrowing and not verdict.within_nominal
    assert "siblings can lend 3" in qb.check(task("org/b"), a100(8)).reason or "borrowing limit 3" in qb.check(task("org/b"), a100(8)).reason
    qb.charge("tb", task("org/b"), a100(7))
    assert qb.is_borrowing("tb")
    rows = {r["quota"]: r for r in qb.usage()}
    assert rows["b"]["borrowed"] == 3 and rows["a"]["lent"] + rows["c"]["lent"] == 3
    # c's own work within nominal is still admissible; a lender may reclaim from b.
    assert qb.check(task("org/c"), a100(2)).ok
    assert qb.reclaimable_by(task("org/c"), "tb") and not qb.reclaimable_by(task("org/b"), "tb")
    # The parent caps the subtree: 10 in all.
    qb.charge("ta", task("org/a"), a100(3))
    assert not qb.check(task("org/c"), a100(1)).ok and "quota org" in qb.check(task("org/c"), a100(1)).reason
    qb.release("tb")
    assert qb.check(task("org/c"), a100(2)).ok


def test_a_task_without_any_quota_is_free_and_top_level_quotas_cannot_borrow() -> None:
    solo = book(quota("solo", "org", {"resource": "gpu", "nominal": 2}))
    assert solo.check(task("other/x"), a100(100)).ok
    verdict = solo.check(task("org"), a100(3))
    assert not verdict.ok and "siblings can lend 0" in verdict.reason


def test_the_state_key_changes_with_what_a_check_reads_and_nothing_else() -> None:
    """QuotaBook.state_key (scheduling/plan_memo.py): equal keys must mean equal verdicts,
    and a change elsewhere must leave the key alone. An NPU head's key follows its own and
    its cohort's NPU usage; a GPU charge anywhere, or usage in another cohort, does not
    move it; the head's verdict under equal keys is the same."""
    limits = ({"resource": "gpu", "nominal": 8}, {"resource": "npu", "nominal": 8})
    b = book(quota("a", "org/a", *limits), quota("b", "org/b", *limits), quota("z", "other/z", *limits))
    head, on_npu, on_both = task("org/a"), [("910b", "ascend-910b3")], [("910b", "ascend-910b3"), ("a100", "nvidia-a100-80g")]
    npu = [Held("910b", "ascend-910b3", 4, 1, 1)]
    before = b.state_key(head, on_npu)
    verdict = b.check(head, npu)
    b.charge("g1", task("org/b"), a100(4))  # a sibling's GPU work: not read by an NPU check
    b.charge("z1", task("other/z"), npu)  # another cohort's NPU work: not read either
    assert b.state_key(head, on_npu) == before and b.check(head, npu) == verdict
    assert b.state_key(head, on_both) != b.state_key(head, on_npu)  # a head that may land on GPUs reads their usage
    b.charge("n1", task("org/b"), npu)  # a sibling's NPU work: what it can lend changed
    assert b.state_key(head, on_npu) != before
    after_sibling = b.state_key(head, on_npu)
    b.charge("n2", task("org/a"), npu)  # its own NPU work
    assert b.state_key(head, on_npu) != after_sibling
    b.release("n2")
    assert b.state_key(head, on_npu) == after_sibling
    # Fresh books of the same quota objects agree; quotas applied again (other objects, here
    # another nominal) are another configuration, even with nothing charged.
    same = (quota("a", "org/a", *limits), quota("b", "org/b", *limits))
    assert book(*same).state_key(head, on_npu) == book(*same).state_key(head, on_npu)
    reapplied = (quota("a", "org/a", {"resource": "npu", "nominal": 4}), same[1])
    assert book(*reapplied).state_key(head, on_npu) != book(*same).state_key(head, on_npu)
