"""Who may do what, on which tenant subtree. Every router asks here.

INTERFACE (filled in by the access work): routers and services call
  require(principal, action, tenant=None)  -> None or raises PermissionDeniedError / NotFoundError
  visible_tenants(principal)                -> None (everything) or the tenant paths whose subtrees it may read
Actions: task.submit, task.read, task.cancel, task.logs, inventory.read, inventory.write,
audit.read, approval.read, approval.decide, quota.write, cost.read, budget.write, user.admin.
"""

from __future__ import annotations

from hetpool.server.services.auth import Principal


def require(principal: Principal, action: str, tenant: str | None = None) -> None:
    """Allow or raise. Placeholder: everyone may do everything (the single-admin model)."""
    return None


def visible_tenants(principal: Principal) -> list[str] | None:
    """None: no restriction."""
    return None


def holds_role(principal: Principal, role: str, tenant: str | None = None) -> bool:
    """Does the principal hold `role` on `tenant` (a binding on it or an ancestor)?
    Placeholder: only the platform admin role exists."""
    return principal.role == "platform-admin" or principal.role == role
