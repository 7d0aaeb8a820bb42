"""Approval requests: opened at submit (tasks) or apply (quota changes), decided by
approvers, expired by a worker step. The rules themselves are pure
(hetpool.governance.approvals); here are the facts they need, the rows and the audit.

A task that needs approval is created in `pending_approval`; approving moves it to
`queued` (and, when it was over quota, marks it with APPROVED_OVER_QUOTA_LABEL so that
the quota engine admits it), rejecting or expiry cancels it. A held Quota is applied
only when approved.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import Text, cast, or_, select
from sqlalchemy.orm import Session

from hetpool.core.errors import ConflictError, NotFoundError, PermissionDeniedError, SpecError
from hetpool.core.governance import APPROVAL_REASON_LABEL, APPROVED_OVER_QUOTA_LABEL, ApprovalPolicySpec
from hetpool.core.quota import QuotaSpec
from hetpool.core.specs import spec_to_document
from hetpool.core.states import TaskState
from hetpool.core.tasks import TaskSpec
from hetpool.core.units import parse_duration
from hetpool.governance.approvals import (
    FACT_BUDGET,
    FACT_OVER_QUOTA,
    FACT_RESERVED_POOLS,
    ApprovalContext,
    ApprovalVerdict,
    evaluate,
    needed_facts,
    policies_for,
    reserved_pools_for,
)
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.db.models import TaskRow
from hetpool.server.db.models_approvals import ApprovalRow
from hetpool.server.services import audit
from hetpool.server.services import cost as cost_service
from hetpool.server.services import quota as quota_service
from hetpool.server.services.access import holds_role, require, visible_tenants
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, apply_specs, load_inventory
from hetpool.server.services.tasks import aware, placement_options, transition

PENDING, APPROVED, REJECTED, EXPIRED, WITHDRAWN = "pending", "approved", "rejected", "expired", "withdrawn"
STATES = (PENDING, APPROVED, REJECTED, EXPIRED, WITHDRAWN)
SYSTEM_ACTOR = "approvals"
# Labels only the server sets; a submitted task carrying one is refused.
SERVER_LABELS = (APPROVED_OVER_QUOTA_LABEL,)


def new_approval_id() -> str:
    return "apr-" + secrets.token_hex(5)


def _policies(inv: Inventory) -> list[ApprovalPolicySpec]:
    return list(inv.governance.get("ApprovalPolicy", {}).values())


# ----------------------------------------------------------------------------- tasks
def check_task_labels(spec: TaskSpec) -> None:
    for label in SERVER_LABELS:
        if label in spec.labels:
            raise SpecError(f"labels: {label!r} is set by the server when a task is approved; remove it", details=[{"loc": "labels", "msg": label}])


def evaluate_task(ctx: ServiceContext, session: Session, inv: Inventory, snap: Snapshot | Callable[[], Snapshot], spec: TaskSpec) -> ApprovalVerdict:
    """Does this task need approval, and why. Looks facts up only for the rules that apply
    (`snap` may be a function that builds the snapshot, called only when a rule needs it)."""
    policies = policies_for(_policies(inv), spec.tenant)
    if not policies:
        return ApprovalVerdict()
    facts: dict = {}
    needs = needed_facts(policies, "task")
    if FACT_OVER_QUOTA in needs:
        facts["over_quota"] = quota_service.over_quota(ctx, session, inv, spec)
    if FACT_BUDGET in needs:
        facts["budget"] = cost_service.budget_exceeded(ctx, session, inv, spec.tenant)
    if FACT_RESERVED_POOLS in needs:
        snap = snap() if callable(snap) else snap
        facts["reserved_pools"] = reserved_pools_for(snap, spec, ctx.compat.check, placement_options(inv, spec)["allowed_pools"])
    return evaluate(policies, ApprovalContext.for_task(spec, **facts))


def plan_summary(verdict: ApprovalVerdict) -> dict:
    return {"needed": verdict.needed, "reasons": [r.to_dict() for r in verdict.reasons], "expire_after": verdict.expire_after}


def open_task_request(ctx: ServiceContext, session: Session, task: TaskRow, spec: TaskSpec, verdict: ApprovalVerdict, actor: str) -> ApprovalRow:
    row = _open(ctx, session, kind="task", tenant=task.tenant, verdict=verdict, actor=actor, reason=spec.labels.get(APPROVAL_REASON_LABEL, ""))
    row.task_id = task.id
    task.message = f"waiting for approval {row.id}: {verdict.summary()}"
    session.flush()
    _audit(session, actor, "approval.request", row, before=None, ts=row.created_at)
    return row


# ---------------------------------------------------------------------------- quotas
def hold_quota_changes(ctx: ServiceContext, session: Session, specs: list[BaseModel], principal: Principal) -> tuple[list[BaseModel], list[dict]]:
    """Split an apply batch: Quota changes that need approval become requests (returned as
    results); the rest is applied as usual. Platform-admins never wait; an unchanged Quota
    is no change."""
    if holds_role(principal, "platform-admin") or not any(isinstance(s, QuotaSpec) for s in specs):
        return specs, []
    inv = load_inventory(ctx, session)
    rest, results = [], []
    for spec in specs:
        current = inv.quotas.get(spec.name) if isinstance(spec, QuotaSpec) else None
        if not isinstance(spec, QuotaSpec) or (current is not None and spec_to_document(current) == spec_to_document(spec)):
            rest.append(spec)
            continue
        context = ApprovalContext(kind="quota", tenant=spec.tenant, by_platform_admin=False)
        verdict = evaluate(_policies(inv), context)
        if not verdict.needed:
            rest.append(spec)
            continue
        row = _open(
            ctx, session, kind="quota", tenant=spec.tenant, verdict=verdict, actor=principal.name, reason=spec.labels.get(APPROVAL_REASON_LABEL, "")
        )
        row.document = spec_to_document(spec)
        session.flush()
        _audit(session, principal.name, "approval.request", row, before=None, ts=row.created_at)
        results.append({"kind": "Quota", "name": spec.name, "action": "held for approval", "id": row.id})
    return rest, results


# ------------------------------------------------------------------------- decisions
def decide(ctx: ServiceContext, session: Session, approval_id: str, principal: Principal, *, approve: bool, comment: str) -> ApprovalRow:
    row = get_row(session, approval_id, principal, for_update=True)
    check_may_decide(principal, row)
    if row.state != PENDING:
        raise ConflictError(f"approval {row.id} was already decided ({row.state}{f' by {row.decided_by}' if row.decided_by else ''})")
    now = ctx.clock.now()
    if aware(row.expires_at) <= now:
        raise ConflictError(f"approval {row.id} expired at {_iso(row.expires_at)}; it can no longer be decided")
    comment = comment.strip()
    if not approve and not comment:
        raise SpecError("comment: a rejection needs a comment saying why", details=[{"loc": "comment", "msg": "required to reject"}])
    task = _task_of(session, row)
    if task is not None and task.state != TaskState.PENDING_APPROVAL.value:
        raise ConflictError(f"task {task.id} is no longer waiting for approval ({task.state})")
    before = _state_view(row)
    row.state, row.decided_by, row.decided_at, row.comment = (APPROVED if approve else REJECTED), principal.name, now, comment
    if row.kind == "quota" and approve:
        apply_specs(ctx, session, [QuotaSpec.model_validate(row.document)], principal.name)
    if task is not None:
        _decide_task(ctx, session, row, task, principal.name, approve, comment)
    _audit(session, principal.name, "approval.approve" if approve else "approval.reject", row, before=before, ts=now)
    return row


def _decide_task(ctx: ServiceContext, session: Session, row: ApprovalRow, task: TaskRow, actor: str, approve: bool, comment: str) -> None:
    suffix = f": {comment}" if comment else ""
    if not approve:
        transition(ctx, session, task, TaskState.CANCELLED, actor=actor, message=f"rejected by {actor}{suffix}")
        return
    fields = {}
    if any(r["rule"] == "over_quota" for r in row.reasons):
        # The marker travels in the spec, so the scheduler's pure quota check sees it
        # without a join; submit refuses it from users.
        labels = {**(task.spec.get("labels") or {}), APPROVED_OVER_QUOTA_LABEL: "true"}
        fields["spec"] = {**task.spec, "labels": labels}
    transition(ctx, session, task, TaskState.QUEUED, actor=actor, message=f"approved by {actor}{suffix}", **fields)


def check_may_decide(principal: Principal, row: ApprovalRow) -> None:
    """Named approvers, tenant-admins of the tenant or above and platform-admins decide;
    never the submitter (unless platform-admin)."""
    admin = holds_role(principal, "platform-admin")
    if row.requested_by == principal.name and not admin:
        raise PermissionDeniedError(f"you requested {row.id}; someone else must decide it")
    if admin or principal.name in (row.approvers or []):
        return
    require(principal, "approval.decide", row.tenant)
    if not holds_role(principal, "tenant-admin", row.tenant):
        named = f", or one of {', '.join(row.approvers)}" if row.approvers else ""
        raise PermissionDeniedError(f"deciding {row.id} needs tenant-admin on {row.tenant} or above, platform-admin{named}")


def expire_due(ctx: ServiceContext, session: Session) -> int:
    """Expire pending requests past their deadline (their tasks are cancelled) and close
    those whose task left pending_approval some other way (cancelled by its owner)."""
    now = ctx.clock.now()
    pending = ApprovalRow.state == PENDING
    left = select(ApprovalRow).join(TaskRow, TaskRow.id == ApprovalRow.task_id).where(pending, TaskRow.state != TaskState.PENDING_APPROVAL.value)
    due = select(ApprovalRow).where(pending, ApprovalRow.expires_at <= now).order_by(ApprovalRow.expires_at)
    if session.bind.dialect.name == "postgresql":  # a second server's worker skips what this one holds
        left, due = left.with_for_update(skip_locked=True, of=ApprovalRow), due.with_for_update(skip_locked=True)
    closed = 0
    for row in session.execute(left).scalars().all():
        before = _state_view(row)
        row.state, row.decided_at = WITHDRAWN, now
        _audit(session, SYSTEM_ACTOR, "approval.withdraw", row, before=before, ts=now)
        closed += 1
    for row in session.execute(due).scalars().all():
        if row.state != PENDING:
            continue  # withdrawn just above
        before = _state_view(row)
        row.state, row.decided_at = EXPIRED, now
        task = _task_of(session, row)
        if task is not None:
            transition(ctx, session, task, TaskState.CANCELLED, actor=SYSTEM_ACTOR, message=f"approval expired after {row.expire_after}")
        _audit(session, SYSTEM_ACTOR, "approval.expire", row, before=before, ts=now)
        closed += 1
    return closed


# ------------------------------------------------------------------------------ read
def may_see(principal: Principal, row: ApprovalRow) -> bool:
    return (
        row.requested_by == principal.name
        or principal.name in (row.approvers or [])
        or holds_role(principal, "platform-admin")
        or holds_role(principal, "tenant-admin", row.tenant)
    )


def get_row(session: Session, approval_id: str, principal: Principal, *, for_update: bool = False) -> ApprovalRow:
    stmt = select(ApprovalRow).where(ApprovalRow.id == approval_id)
    if for_update and session.bind.dialect.name == "postgresql":
        stmt = stmt.with_for_update()
    row = session.execute(stmt).scalar_one_or_none()
    if row is None or not may_see(principal, row):  # not visible reads as absent
        raise NotFoundError(f"approval {approval_id!r} not found")
    return row


def list_requests(
    session: Session, principal: Principal, *, state: str | None = None, tenant: str | None = None, limit: int = 200
) -> list[ApprovalRow]:
    stmt = select(ApprovalRow).order_by(ApprovalRow.created_at.desc(), ApprovalRow.id)
    if state:
        stmt = stmt.where(ApprovalRow.state == state)
    if tenant:
        stmt = stmt.where((ApprovalRow.tenant == tenant) | ApprovalRow.tenant.startswith(tenant + "/", autoescape=True))
    scopes = visible_tenants(principal, "approval.decide")  # where it is tenant-admin (None: everywhere)
    if scopes is not None:
        # Named approvers are found in the JSON list's text; may_see below is the exact check.
        mine = [ApprovalRow.requested_by == principal.name, cast(ApprovalRow.approvers, Text).contains(json.dumps(principal.name), autoescape=True)]
        mine += [(ApprovalRow.tenant == t) | ApprovalRow.tenant.startswith(t + "/", autoescape=True) for t in scopes]
        stmt = stmt.where(or_(*mine))
    return [r for r in session.execute(stmt.limit(limit)).scalars() if may_see(principal, r)]


def pending_for_task(session: Session, task_id: str) -> dict | None:
    """The open request of a task, for its detail view."""
    row = session.execute(select(ApprovalRow).where(ApprovalRow.task_id == task_id, ApprovalRow.state == PENDING)).scalars().first()
    if row is None:
        return None
    return {"id": row.id, "reasons": row.reasons, "expires_at": _iso(row.expires_at), "approvers": row.approvers}


def approval_dict(row: ApprovalRow) -> dict:
    return {
        "id": row.id,
        "kind": row.kind,
        "state": row.state,
        "tenant": row.tenant,
        "task_id": row.task_id,
        "document": row.document,
        "reasons": row.reasons,
        "reason": row.reason,
        "policies": row.policies,
        "approvers": row.approvers,
        "requested_by": row.requested_by,
        "created_at": _iso(row.created_at),
        "expire_after": row.expire_after,
        "expires_at": _iso(row.expires_at),
        "decided_by": row.decided_by,
        "decided_at": _iso(row.decided_at),
        "comment": row.comment,
    }


# --------------------------------------------------------------------------- helpers
def _open(ctx: ServiceContext, session: Session, *, kind: str, tenant: str, verdict: ApprovalVerdict, actor: str, reason: str) -> ApprovalRow:
    now = ctx.clock.now()
    expire_after = verdict.expire_after or "24h"
    row = ApprovalRow(
        id=new_approval_id(),
        kind=kind,
        state=PENDING,
        tenant=tenant,
        reasons=[r.to_dict() for r in verdict.reasons],
        reason=reason,
        policies=list(verdict.policies),
        approvers=list(verdict.approvers),
        requested_by=actor,
        created_at=now,
        expire_after=expire_after,
        expires_at=now + timedelta(seconds=parse_duration(expire_after)),
        comment="",
    )
    session.add(row)
    return row


def _task_of(session: Session, row: ApprovalRow) -> TaskRow | None:
    return session.get(TaskRow, row.task_id) if row.task_id else None


def _state_view(row: ApprovalRow) -> dict:
    return {"state": row.state}


def _audit(session: Session, actor: str, action: str, row: ApprovalRow, *, before: dict | None, ts: datetime) -> None:
    after = {"state": row.state, "kind": row.kind, "tenant": row.tenant, "reasons": row.reasons}
    after.update({k: v for k, v in (("task_id", row.task_id), ("reason", row.reason), ("comment", row.comment)) if v})
    if row.decided_by:
        after["decided_by"] = row.decided_by
    if row.kind == "quota" and action == "approval.request":
        after["document"] = row.document
    audit.record(session, actor=actor, action=action, object_kind="Approval", object_id=row.id, before=before, after=after, ts=ts)


def _iso(ts: datetime | None) -> str | None:
    ts = aware(ts)
    return ts.isoformat().replace("+00:00", "Z") if ts else None
