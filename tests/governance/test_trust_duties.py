"""The pure pieces of separation of duties (governance.duties) and of what loosens a
governed object (governance.approvals.loosens); the API tests are
tests/server/test_trust_approvals.py."""

from __future__ import annotations

from hetpool.core.governance import ApprovalPolicySpec, BudgetSpec
from hetpool.governance.approvals import loosens
from hetpool.governance.duties import CREATED, GRANTED, ISSUED_TOKEN, DecisionFacts, Vouch, check_duties

ADMINS = frozenset({"root", "root2"})
VOUCHES = (
    Vouch("root", CREATED, "lead"),
    Vouch("lead", CREATED, "puppet"),
    Vouch("puppet", CREATED, "puppet2"),
    Vouch("lead", CREATED, "newbie"),
    Vouch("root", CREATED, "olga"),
    Vouch("lead", GRANTED, "olga", "infra"),  # a grant elsewhere links nobody for ai-lab
    Vouch("olga", ISSUED_TOKEN, "root2"),
)


def verdict(requester: str, decider: str, tenant: str = "ai-lab/nlp"):
    return check_duties(DecisionFacts(requester, decider, tenant, ADMINS, VOUCHES))


def test_who_is_no_second_person() -> None:
    assert verdict("newbie", "lead").rule == "vouched"  # its creator
    assert verdict("lead", "puppet2").rule == "vouched"  # a puppet's puppet
    assert verdict("newbie", "puppet2").rule == "vouched"  # cousins under one user
    assert not verdict("newbie", "olga").refused  # the infra grant does not reach ai-lab/nlp
    assert verdict("newbie", "olga", "infra/x").rule == "vouched"
    assert verdict("lead", "root").rule == "vouched"  # a platform-admin and what it created directly
    assert not verdict("newbie", "root").refused  # ... but not what that one created
    assert verdict("olga", "root2").rule == "vouched"  # olga issued root2's token
    assert verdict("root", "root2").refused is False  # a platform-admin's request: any other admin
    assert verdict("olga", "olga").rule == "own_request"
    assert verdict("root", "root").rule == "own_request"  # two platform-admins: not one's own
    lone = check_duties(DecisionFacts("root", "root", "ai-lab", frozenset({"root"}), VOUCHES))
    assert not lone.refused and lone.sole_admin_own_request


def test_what_loosens_a_budget_or_a_policy() -> None:
    budget = BudgetSpec(name="b", tenant="ai-lab", amount=100, hard_stop=True)
    assert loosens(budget, None) and not loosens(None, budget)
    assert loosens(budget, budget.model_copy(update={"amount": 200}))
    assert not loosens(budget, budget.model_copy(update={"amount": 50, "description": "tighter"}))
    assert loosens(budget, budget.model_copy(update={"hard_stop": False}))
    assert loosens(budget, budget.model_copy(update={"period": "week"}))
    assert loosens(budget, budget.model_copy(update={"alert_at": [1.0]}))
    policy = ApprovalPolicySpec(name="p", tenant="ai-lab", max_devices=8, environments=["prod"])
    assert not loosens(policy, policy.model_copy(update={"max_devices": 4, "max_runtime": "1d", "reserved_pools": True}))
    assert loosens(policy, policy.model_copy(update={"max_devices": None}))
    assert loosens(policy, policy.model_copy(update={"environments": []}))
    assert loosens(policy, policy.model_copy(update={"approvers": ["x"]}))
    assert loosens(policy, policy.model_copy(update={"quota_changes": False}))
    assert loosens(policy, policy.model_copy(update={"expire_after": "48h"}))
    assert loosens(None, policy.model_copy(update={"approvers": ["x"]})) and not loosens(None, policy)
