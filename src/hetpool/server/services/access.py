"""Who may do what, on which tenant subtree. Every router asks here; the rules themselves
(roles → actions, subtree scopes) are pure, in hetpool.governance.access.

INTERFACE (used by routers and other services):
  require(principal, action, tenant=None)  -> None or raises PermissionDeniedError
      tenant=None asks "may it do this anywhere" (lists are then narrowed by visible_tenants)
  require_visible(principal, action, tenant, what) -> None, NotFoundError (cannot even read
      the object: don't reveal it exists) or PermissionDeniedError (can read, not do `action`)
  visible_tenants(principal, action="task.read") -> None (everything) or the tenant paths
      whose subtrees it may read ([] for nothing)
  holds_role(principal, role, tenant=None) -> bool (platform-admin holds every role)
  sees_object(principal, kind, spec_or_document) -> bool: may it read this inventory object?
      Tenant-scoped kinds (governance.access.TENANT_FIELD_OF_KIND: Tenant, Quota, Budget,
      ApprovalPolicy, ReclaimPolicy) are filtered to the caller's subtrees and their
      ancestors; the shared inventory (clusters, nodes, pools, templates ...) is not.
Actions: see hetpool.governance.access.ACTIONS.
"""

from __future__ import annotations

from hetpool.core.errors import NotFoundError, PermissionDeniedError
from hetpool.governance import access as rules
from hetpool.server.services.auth import Principal

READ_ACTION_OF = {"task": "task.read", "approval": "approval.read"}


def allowed(principal: Principal, action: str, tenant: str | None = None) -> bool:
    return rules.allows(principal.bindings, action, tenant)


def require(principal: Principal, action: str, tenant: str | None = None) -> None:
    """Allow or raise PermissionDeniedError naming the action and the roles held."""
    if not rules.allows(principal.bindings, action, tenant):
        raise PermissionDeniedError(
            rules.denial(principal.bindings, action, tenant),
            details=[{"loc": "action", "msg": action}, *([{"loc": "tenant", "msg": tenant}] if tenant else [])],
        )


def require_visible(principal: Principal, action: str, tenant: str, what: str) -> None:
    """For one object of `tenant` (e.g. what="task 't-…'"): 404 if the principal may not
    read it, so that other teams' objects stay invisible; 403 if it may read but not act."""
    read = READ_ACTION_OF.get(action.split(".")[0], action)
    if not rules.allows(principal.bindings, read, tenant):
        raise NotFoundError(f"{what} not found")
    require(principal, action, tenant)


def visible_tenants(principal: Principal, action: str = "task.read") -> list[str] | None:
    """None: no restriction; else the roots of the subtrees where `action` is allowed."""
    return rules.scopes_for(principal.bindings, action)


def can_see(principal: Principal, tenant: str, action: str = "task.read") -> bool:
    return rules.allows(principal.bindings, action, tenant)


def holds_role(principal: Principal, role: str, tenant: str | None = None) -> bool:
    """Does the principal hold `role` on `tenant` (a binding on it or an ancestor)? A
    platform-admin holds every role everywhere."""
    return rules.holds(principal.bindings, role, tenant)


def sees_object(principal: Principal, kind: str, spec: object) -> bool:
    """May the principal read this inventory object (a spec or its document)? Another
    tenant's quota, budget or policy is hidden like its tasks: lists leave it out and a
    read of it is 404, so neither its content nor its existence leaks."""
    scoped, tenant = rules.object_tenant(kind, spec)
    if not scoped:
        return rules.allows(principal.bindings, "inventory.read")
    return rules.sees_governing(principal.bindings, "inventory.read", tenant)
