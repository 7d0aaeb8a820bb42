"""never_within_quota: a task is only "over its quota even with borrowing" when every
placement it could have on the idle estate exceeds a quota's ceiling."""

from __future__ import annotations

from hetpool.catalog.devices import DeviceCatalog
from hetpool.core.specs import parse_spec
from hetpool.governance.quota import QuotaBook
from hetpool.scheduling.quota_fit import never_within_quota
from tests.scheduling.factories import CUDA_STACK, alloc, compat_check, make_snapshot, node, pool, task

CHECK = compat_check()
MODELS = {m.name: m for m in DeviceCatalog.builtin()}
A100, H800 = "nvidia-a100-80g", "nvidia-h800"


def _quota(name: str, tenant: str, *limits: dict) -> object:
    return parse_spec({"kind": "Quota", "name": name, "tenant": tenant, "limits": list(limits)})


def _book(*quotas) -> QuotaBook:
    return QuotaBook(quotas, MODELS, {"a100": A100, "h800": H800})


def _estate(allocations=()):
    nodes = [node(f"a{i}", A100, 8, stack=CUDA_STACK) for i in range(2)] + [node(f"h{i}", H800, 8, stack=CUDA_STACK) for i in range(2)]
    pools = [pool("a100", A100, ["a0", "a1"]), pool("h800", H800, ["h0", "h1"])]
    return make_snapshot(nodes, pools, allocations)


def test_a_request_above_nominal_plus_borrowable_is_named_with_its_limits() -> None:
    parent = _quota("org", "org", {"resource": "gpu", "nominal": 16})
    mine = _quota("nlp", "org/nlp", {"resource": "gpu", "nominal": 4, "borrowing_limit": 2})
    sibling = _quota("cv", "org/cv", {"resource": "gpu", "nominal": 8})
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1)
    ceiling = never_within_quota(_book(parent, mine, sibling), _estate().emptied(), spec, CHECK)
    assert ceiling is not None
    assert (ceiling.quota, ceiling.resource, ceiling.requested, ceiling.nominal, ceiling.borrowing_limit, ceiling.borrowable) == (
        "nlp",
        "gpu",
        8,
        4,
        2,
        2,
    )


def test_borrowing_within_the_limit_is_not_a_ceiling() -> None:
    mine = _quota("nlp", "org/nlp", {"resource": "gpu", "nominal": 4})
    sibling = _quota("cv", "org/cv", {"resource": "gpu", "nominal": 8, "lending_limit": 4})
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1)
    assert never_within_quota(_book(mine, sibling), _estate().emptied(), spec, CHECK) is None
    # One more device than nominal + what the sibling may lend: refused.
    spec9 = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 1}, workers=9)
    ceiling = never_within_quota(_book(mine, sibling), _estate().emptied(), spec9, CHECK)
    assert ceiling is not None and ceiling.borrowable == 4 and ceiling.requested == 9


def test_a_task_that_may_use_either_model_is_refused_only_when_both_exceed() -> None:
    # 8 A100s are above the A100 quota; 8 H800s fit under the H800 quota.
    quotas = _quota("nlp", "org/nlp", {"resource": A100, "nominal": 4}, {"resource": H800, "nominal": 8})
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "models": [A100], "count": 8}, workers=1, fallback=[H800])
    assert never_within_quota(_book(quotas), _estate().emptied(), spec, CHECK) is None
    any_of = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1, any_of=[A100, H800])
    assert never_within_quota(_book(quotas), _estate().emptied(), any_of, CHECK) is None
    by_class = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1)
    assert never_within_quota(_book(quotas), _estate().emptied(), by_class, CHECK) is None
    tight = _quota("nlp", "org/nlp", {"resource": A100, "nominal": 4}, {"resource": H800, "nominal": 4})
    ceiling = never_within_quota(_book(tight), _estate().emptied(), spec, CHECK)
    assert ceiling is not None and ceiling.resource == A100  # the preferred placement's quota is named


def test_queue_pools_limit_the_placements_tried() -> None:
    quotas = _quota("nlp", "org/nlp", {"resource": A100, "nominal": 4}, {"resource": H800, "nominal": 8})
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1)
    ceiling = never_within_quota(_book(quotas), _estate().emptied(), spec, CHECK, allowed_pools={"a100"})
    assert ceiling is not None and ceiling.quota == "nlp" and ceiling.resource == A100


def test_no_quota_no_applicable_quota_or_no_placement_is_none() -> None:
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=1)
    idle = _estate().emptied()
    assert never_within_quota(None, idle, spec, CHECK) is None
    assert never_within_quota(_book(), idle, spec, CHECK) is None
    other = _quota("cv", "org/cv", {"resource": "gpu", "nominal": 1})
    assert never_within_quota(_book(other), idle, spec, CHECK) is None
    huge = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 8}, workers=9)
    assert never_within_quota(_book(_quota("nlp", "org/nlp", {"resource": "gpu", "nominal": 1})), idle, huge, CHECK) is None


def test_running_work_does_not_matter_and_the_snapshot_is_untouched() -> None:
    # The verdict is about the ceiling: a busy estate's idle copy gives the same answer.
    busy = _estate([alloc("a0", "a100", range(8)), alloc("h0", "h800", range(8))])
    mine = _quota("nlp", "org/nlp", {"resource": "gpu", "nominal": 2, "borrowing_limit": 0})
    spec = task(tenant="org/nlp/p", devices={"class": "gpu", "count": 4}, workers=1)
    idle = busy.emptied()
    before = [d.copy() for d in idle.dev_free]
    assert never_within_quota(_book(mine), idle, spec, CHECK).requested == 4
    assert all((a == b).all() for a, b in zip(before, idle.dev_free, strict=True))
