"""The role → action table and tenant-subtree scopes (hetpool.governance.access, pure)."""

from __future__ import annotations

import pytest

from hetpool.governance.access import (
    ACTIONS,
    ROLES,
    Binding,
    allows,
    can_grant,
    covers,
    denial,
    holds,
    parse_binding,
    role_table,
    scopes_for,
    summary_role,
    validate_binding,
    write_action,
)

NLP_MEMBER = [Binding("member", "ai-lab/nlp")]


def test_a_scope_covers_its_subtree_only() -> None:
    assert covers("ai-lab/nlp", "ai-lab/nlp") and covers("ai-lab/nlp", "ai-lab/nlp/llm-sft")
    assert not covers("ai-lab/nlp", "ai-lab") and not covers("ai-lab/nlp", "ai-lab/cv")
    assert not covers("ai-lab/nlp", "ai-lab/nlp-2")  # a prefix of the name is not a parent
    assert covers(None, "infra/data")


@pytest.mark.parametrize(
    ("role", "allowed", "denied"),
    [
        ("platform-admin", set(ACTIONS), set()),
        (
            "tenant-admin",
            {"task.submit", "task.read", "task.cancel", "task.logs", "approval.decide", "quota.write", "user.admin", "inventory.read", "cost.read"},
            {"inventory.write", "audit.read", "budget.write", "node.report"},
        ),
        (
            "member",
            {"task.submit", "task.read", "task.cancel", "task.logs", "inventory.read", "cost.read"},
            {"approval.decide", "user.admin", "quota.write"},
        ),
        ("viewer", {"task.read", "inventory.read"}, {"task.submit", "task.cancel", "task.logs", "cost.read"}),
        ("auditor", {"audit.read"}, set(ACTIONS) - {"audit.read"}),
        ("agent", {"node.report"}, set(ACTIONS) - {"node.report"}),
    ],
)
def test_role_table(role: str, allowed: set[str], denied: set[str]) -> None:
    tenant = None if role in ("platform-admin", "auditor", "agent") else "ai-lab"
    bindings = [Binding(role, tenant)]
    assert {a for a in ACTIONS if allows(bindings, a)} >= allowed
    assert not {a for a in denied if allows(bindings, a)}
    assert set(role_table()[role]) >= allowed


def test_scoped_roles_act_only_inside_their_subtree() -> None:
    assert allows(NLP_MEMBER, "task.submit", "ai-lab/nlp/llm-sft")
    assert not allows(NLP_MEMBER, "task.submit", "ai-lab/cv")
    assert not allows(NLP_MEMBER, "task.read", "ai-lab")  # not the parent either
    assert allows(NLP_MEMBER, "task.read")  # "anywhere" questions: some binding allows it
    both = [*NLP_MEMBER, Binding("viewer", "infra")]
    assert allows(both, "task.read", "infra/data/etl") and not allows(both, "task.cancel", "infra/data/etl")
    with pytest.raises(ValueError, match="unknown action"):
        allows(NLP_MEMBER, "task.delete")


def test_scopes_are_the_smallest_list_of_roots() -> None:
    bindings = [Binding("member", "ai-lab/nlp/llm-sft"), Binding("viewer", "ai-lab/nlp"), Binding("member", "infra/data")]
    assert scopes_for(bindings, "task.read") == ["ai-lab/nlp", "infra/data"]
    assert scopes_for(bindings, "task.submit") == ["ai-lab/nlp/llm-sft", "infra/data"]
    assert scopes_for(bindings, "audit.read") == []
    assert scopes_for([Binding("platform-admin")], "task.read") is None


def test_bindings_are_validated_with_the_field_and_the_allowed_values() -> None:
    assert validate_binding("member", "/ai-lab/nlp/") == Binding("member", "ai-lab/nlp")
    assert validate_binding("auditor", "") == Binding("auditor", None)
    with pytest.raises(ValueError, match=r"role: unknown role 'owner'; roles: platform-admin, tenant-admin, member, viewer, auditor, agent"):
        validate_binding("owner", "ai-lab")
    with pytest.raises(ValueError, match=r"^bindings\[1\]\.tenant: auditor is a global role"):
        validate_binding("auditor", "ai-lab", where="bindings[1]")
    with pytest.raises(ValueError, match="tenant: member is granted on a tenant subtree"):
        validate_binding("member", None)
    with pytest.raises(ValueError, match="tenant: tenant must be a path"):
        validate_binding("viewer", "AI Lab")
    assert parse_binding("tenant-admin=ai-lab") == Binding("tenant-admin", "ai-lab")
    assert parse_binding("platform-admin") == Binding("platform-admin")


def test_who_may_grant_what() -> None:
    admin = [Binding("tenant-admin", "ai-lab")]
    assert can_grant(admin, Binding("member", "ai-lab/nlp")) and can_grant(admin, Binding("tenant-admin", "ai-lab/cv"))
    assert not can_grant(admin, Binding("member", "infra"))
    assert not can_grant(admin, Binding("auditor"))  # global roles are the platform's
    assert not can_grant(NLP_MEMBER, Binding("viewer", "ai-lab/nlp"))
    assert can_grant([Binding("platform-admin")], Binding("agent"))


def test_holds_role_and_summary() -> None:
    assert holds([Binding("tenant-admin", "ai-lab")], "tenant-admin", "ai-lab/nlp")
    assert not holds([Binding("tenant-admin", "ai-lab/nlp")], "tenant-admin", "ai-lab")
    assert holds([Binding("platform-admin")], "tenant-admin", "infra")
    assert summary_role([Binding("viewer", "x"), Binding("tenant-admin", "y")]) == "tenant-admin" and summary_role([]) == ""
    assert set(ROLES) == set(role_table())


def test_denial_names_the_action_the_roles_that_allow_it_and_what_is_held() -> None:
    message = denial(NLP_MEMBER, "inventory.write")
    assert "inventory.write" in message and "platform-admin" in message and "member@ai-lab/nlp" in message
    assert "on tenant 'ai-lab/cv'" in denial(NLP_MEMBER, "task.submit", "ai-lab/cv")


def test_which_action_writing_a_kind_needs() -> None:
    assert write_action("Quota") == ("quota.write", "tenant")
    assert write_action("Budget") == ("budget.write", "tenant")
    assert write_action("Pool") == ("inventory.write", None)
