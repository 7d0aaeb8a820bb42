"""Roles, the actions they allow and the tenant subtrees they cover. Pure: no DB, no web.

A user holds bindings (role, scope). A scope is a tenant path and covers that tenant and
everything below it ("ai-lab/nlp" covers "ai-lab/nlp/llm-sft"); global roles have no scope
(None) and cover everything. An action is allowed on a tenant when some binding's role
grants it and its scope covers the tenant; an action asked without a tenant (listing,
inventory, audit) is allowed when some binding grants it at all — callers then narrow
what is shown with `scopes_for`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hetpool.core.specs import SPEC_KINDS
from hetpool.core.tenancy import validate_tenant_path

ACTIONS = (
    "task.submit",
    "task.read",
    "task.cancel",
    "task.logs",
    "inventory.read",
    "inventory.write",
    "audit.read",
    "approval.read",
    "approval.decide",
    "quota.write",
    "cost.read",
    "budget.write",
    "user.admin",
    "node.report",
)

_TASK_ALL = ("task.submit", "task.read", "task.cancel", "task.logs")

# The role → action table. platform-admin is the only role with inventory.write, audit
# reads are for platform-admin and auditor only, and agents can do nothing but report
# their node (a stolen agent token neither reads tasks nor changes inventory).
ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "platform-admin": frozenset(ACTIONS),
    "tenant-admin": frozenset({*_TASK_ALL, "inventory.read", "approval.read", "approval.decide", "quota.write", "cost.read", "user.admin"}),
    "member": frozenset({*_TASK_ALL, "inventory.read", "approval.read", "cost.read"}),
    "viewer": frozenset({"task.read", "inventory.read", "approval.read"}),
    "auditor": frozenset({"audit.read"}),
    "agent": frozenset({"node.report"}),
}
ROLES = tuple(ROLE_ACTIONS)
GLOBAL_ROLES = frozenset({"platform-admin", "auditor", "agent"})
SCOPED_ROLES = frozenset(ROLES) - GLOBAL_ROLES
# Strongest first: what a user's one-word `role` summary shows.
ROLE_RANK = ("platform-admin", "tenant-admin", "member", "viewer", "auditor", "agent")


@dataclass(frozen=True, order=True)
class Binding:
    role: str
    tenant: str | None = None  # None: global

    def to_dict(self) -> dict:
        return {"role": self.role, "tenant": self.tenant}

    def __str__(self) -> str:
        return f"{self.role}@{self.tenant}" if self.tenant else self.role


def covers(scope: str | None, tenant: str) -> bool:
    """Does a binding on `scope` reach `tenant`? (None: everywhere.)"""
    return scope is None or tenant == scope or tenant.startswith(scope + "/")


def validate_binding(role: object, tenant: object = None, *, where: str = "") -> Binding:
    """A checked binding, or ValueError naming the field and the allowed values."""
    prefix = f"{where}." if where else ""
    if not isinstance(role, str) or role not in ROLE_ACTIONS:
        raise ValueError(f"{prefix}role: unknown role {role!r}; roles: {', '.join(ROLES)}")
    if tenant in ("", "*"):
        tenant = None
    if role in GLOBAL_ROLES:
        if tenant is not None:
            raise ValueError(f"{prefix}tenant: {role} is a global role; leave the tenant out (scoped roles: {', '.join(sorted(SCOPED_ROLES))})")
        return Binding(role, None)
    if tenant is None:
        raise ValueError(f"{prefix}tenant: {role} is granted on a tenant subtree; give one such as 'ai-lab/nlp'")
    if not isinstance(tenant, str):
        raise ValueError(f"{prefix}tenant: expected a tenant path such as 'ai-lab/nlp'")
    try:
        return Binding(role, validate_tenant_path(tenant))
    except ValueError as exc:
        raise ValueError(f"{prefix}tenant: {exc}") from None


def parse_binding(text: str) -> Binding:
    """'member=ai-lab/nlp' or 'auditor' (a global role) → Binding."""
    role, _, tenant = text.partition("=")
    return validate_binding(role.strip(), tenant.strip() or None)


def allows(bindings: Iterable[Binding], action: str, tenant: str | None = None) -> bool:
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; actions: {', '.join(ACTIONS)}")
    return any(action in ROLE_ACTIONS.get(b.role, ()) and (tenant is None or covers(b.tenant, tenant)) for b in bindings)


def denial(bindings: Iterable[Binding], action: str, tenant: str | None = None) -> str:
    """Why `action` is refused, naming the action, what the user holds and who may."""
    held = sorted(set(bindings))
    holding = ", ".join(str(b) for b in held) if held else "no role"
    grantors = [r for r in ROLES if action in ROLE_ACTIONS[r]]
    where = f" on tenant {tenant!r}" if tenant else ""
    return f"permission denied: {action}{where} needs role {' or '.join(grantors)}; you hold {holding}"


def scopes_for(bindings: Iterable[Binding], action: str) -> list[str] | None:
    """Tenant subtrees where `action` is allowed: None for everywhere, else the smallest
    list of roots (a subtree under another listed one is left out)."""
    roots: set[str] = set()
    for b in bindings:
        if action in ROLE_ACTIONS.get(b.role, ()):
            if b.tenant is None:
                return None
            roots.add(b.tenant)
    return sorted(r for r in roots if not any(other != r and covers(other, r) for other in roots))


def sees_governing(bindings: Iterable[Binding], action: str, tenant: str | None) -> bool:
    """May holders of `bindings` (who may do `action`) see an object that governs `tenant`
    (its Quota, Budget, policies, the Tenant itself)? Yes inside a subtree where `action`
    is allowed, and for an ancestor of such a subtree, whose quota, budget and policies
    bind the caller's tasks too (quota usage and budget status show those already). An
    object without a tenant applies to everyone. Not a sibling's or another org's."""
    scopes = scopes_for(bindings, action)
    if scopes is None or (tenant is None and scopes):
        return True
    return tenant is not None and any(covers(s, tenant) or covers(tenant, s) for s in scopes)


def preemption_notice(victim_tenant: str, preemptor_tenant: str, preemptor_id: str, message: str) -> str:
    """The preemption message kept in the victim task's events, which its readers see.
    They may read tasks of the victim's subtree only, so a preemptor from anywhere else
    (a sibling reclaiming its quota, another org) is named as "another tenant": its task
    id and tenant path are not theirs to know. What was freed, where, stays."""
    if covers(victim_tenant, preemptor_tenant):
        return message
    message = message.replace(f"quota reclaimed by {preemptor_tenant}:", "quota reclaimed by another tenant:")
    return message.replace(f"preempted by {preemptor_id}", "preempted by a task of another tenant")


def holds(bindings: Iterable[Binding], role: str, tenant: str | None = None) -> bool:
    """Does some binding of `role` (or platform-admin, which holds every role) reach `tenant`?"""
    return any((b.role == role or b.role == "platform-admin") and (tenant is None or covers(b.tenant, tenant)) for b in bindings)


def can_grant(granter: Iterable[Binding], binding: Binding) -> bool:
    """platform-admin grants anything; a tenant-admin grants scoped roles within its subtrees."""
    granter = list(granter)
    if any(b.role == "platform-admin" for b in granter):
        return True
    if binding.tenant is None:  # global roles are the platform's to give
        return False
    return any(b.role == "tenant-admin" and covers(b.tenant, binding.tenant) for b in granter)


def summary_role(bindings: Iterable[Binding]) -> str:
    """The strongest role held ('' for none), kept in users.role for display."""
    held = {b.role for b in bindings}
    return next((r for r in ROLE_RANK if r in held), "")


def role_table() -> dict[str, list[str]]:
    return {role: [a for a in ACTIONS if a in actions] for role, actions in ROLE_ACTIONS.items()}


# Which action applying or deleting each kind needs, and the field naming its tenant.
# Quotas and budgets are tenant-scoped so tenant-admins can be allowed them within their
# subtree; everything else shapes the shared platform and is inventory.write.
KIND_ACTIONS: dict[str, tuple[str, str | None]] = {
    "Quota": ("quota.write", "tenant"),
    "Budget": ("budget.write", "tenant"),
    "Task": ("task.submit", "tenant"),
}


def write_action(kind: str) -> tuple[str, str | None]:
    """(action, tenant field or None) for applying or deleting an object of `kind`."""
    return KIND_ACTIONS.get(kind, ("inventory.write", None))


# Kinds whose objects belong to a tenant, and the field naming it (a Tenant is its own path).
# Derived from the specs, so a new kind with a `tenant` field is filtered (and walked by
# tests/server/test_role_walk.py) without anyone remembering to list it. Tasks have their
# own endpoints and rules.
TENANT_FIELD_OF_KIND: dict[str, str] = {
    "Tenant": "name",
    **{kind: "tenant" for kind, model in SPEC_KINDS.items() if "tenant" in model.model_fields and kind != "Task"},
}


def object_tenant(kind: str, spec: object) -> tuple[bool, str | None]:
    """(whether `kind` is tenant-scoped, the tenant `spec` — a spec or its document —
    belongs to, or None for an object that applies to every tenant)."""
    field = TENANT_FIELD_OF_KIND.get(kind)
    if field is None:
        return False, None
    return True, spec.get(field) if isinstance(spec, dict) else getattr(spec, field, None)
