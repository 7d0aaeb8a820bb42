"""Approval requests: opened at submit (tasks), or at apply or delete of a governed object
(Quota, Budget, ApprovalPolicy), decided by approvers, expired by a worker step. The rules
themselves are pure (hetpool.governance.approvals, .duties); here are the facts they
need, the rows and the audit.

A task that needs approval is created in `pending_approval`; approving moves it to
`queued` (and, when it was over quota, marks it with APPROVED_OVER_QUOTA_LABEL so that
the quota engine admits it), rejecting or expiry cancels it. A held change or delete of
an object takes effect only when approved. Whoever decides must pass the role check
(check_may_decide) and separation of duties (services.duties).
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import BaseModel, ValidationError
from sqlalchemy import Text, cast, or_, select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.errors import ConflictError, NotFoundError, PermissionDeniedError, SpecError
from hetpool.core.governance import APPROVAL_REASON_LABEL, APPROVED_OVER_QUOTA_LABEL, ApprovalPolicySpec
from hetpool.core.specs import SPEC_KINDS, resolve_kind, spec_to_document
from hetpool.core.states import TaskState
from hetpool.core.tasks import TaskSpec
from hetpool.core.units import parse_duration
from hetpool.governance.approvals import (
    FACT_BUDGET,
    FACT_OVER_QUOTA,
    FACT_RESERVED_POOLS,
    ApprovalContext,
    ApprovalVerdict,
    Reason,
    evaluate,
    loosens,
    needed_facts,
    policies_for,
    reserved_pools_for,
)
from hetpool.scheduling.snapshot import Snapshot
from hetpool.server.db.models import TaskRow
from hetpool.server.db.models_approvals import ApprovalRow
from hetpool.server.services import audit, duties
from hetpool.server.services import cost as cost_service
from hetpool.server.services import quota as quota_service
from hetpool.server.services.access import holds_role, require, visible_tenants
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory, apply_specs, delete_object, load_inventory
from hetpool.server.services.task_lifecycle import transition
from hetpool.server.services.task_planning import placement_options

PENDING, APPROVED, REJECTED, EXPIRED, WITHDRAWN = "pending", "approved", "rejected", "expired", "withdrawn"
STATES = (PENDING, APPROVED, REJECTED, EXPIRED, WITHDRAWN)
SYSTEM_ACTOR = "approvals"
# Labels only the server sets; a submitted task carrying one is refused.
SERVER_LABELS = (APPROVED_OVER_QUOTA_LABEL,)
# Objects whose changes a policy may hold: kind -> the approval request's kind. Budgets and
# ApprovalPolicies only platform-admins may write, so only platform-admins decide them.
GOVERNED = {"Quota": "quota", "Budget": "budget", "ApprovalPolicy": "approvalpolicy"}
OBJECT_KIND = {v: k for k, v in GOVERNED.items()}
PLATFORM_DECIDED = frozenset({"budget", "approvalpolicy"})


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


def may_approve_over_quota(inv: Inventory, tenant: str) -> bool:
    """Does an ApprovalPolicy of the tenant (or above) route over-quota tasks to approval?
    Then such a task is not refused at submit: approved, it runs over quota."""
    return any(p.over_quota for p in policies_for(_policies(inv), tenant))


def plan_summary(verdict: ApprovalVerdict) -> dict:
    return {"needed": verdict.needed, "reasons": [r.to_dict() for r in verdict.reasons], "expire_after": verdict.expire_after}


def open_task_request(ctx: ServiceContext, session: Session, task: TaskRow, spec: TaskSpec, verdict: ApprovalVerdict, actor: str) -> ApprovalRow:
    row = _open(ctx, session, kind="task", tenant=task.tenant, verdict=verdict, actor=actor, reason=spec.labels.get(APPROVAL_REASON_LABEL, ""))
    row.task_id = task.id
    task.message = f"waiting for approval {row.id}: {verdict.summary()}"
    session.flush()
    _audit(session, actor, "approval.request", row, before=None, ts=row.created_at)
    return row


# ------------------------------------------------------------------ governed objects
def hold_governed_changes(ctx: ServiceContext, session: Session, specs: list[BaseModel], principal: Principal) -> tuple[list[BaseModel], list[dict]]:
    """Split an apply batch: changes of governed objects that a policy holds become
    requests (returned as results); the rest is applied as usual. Every object of the
    batch is judged against the policies in force before the batch (a batch that also
    loosens a policy does not free itself), and a Quota or Budget moved to another tenant
    against the policies of both. An unchanged object is no change."""
    if not any(s.kind in GOVERNED for s in specs):
        return specs, []
    inv = load_inventory(ctx, session)
    policies = _policies(inv)
    rest, results = [], []
    for spec in specs:
        current = inv.by_kind(spec.kind).get(spec.name) if spec.kind in GOVERNED else None
        if spec.kind not in GOVERNED or (current is not None and spec_to_document(current) == spec_to_document(spec)):
            rest.append(spec)
            continue
        verdict, tenant = _object_verdict(policies, principal, spec.kind, spec.name, current, spec)
        if not verdict.needed:
            rest.append(spec)
            continue
        row = _hold(ctx, session, principal, spec, verdict, tenant, "apply")
        results.append({"kind": spec.kind, "name": spec.name, "action": "held for approval", "id": row.id})
    return rest, results


def hold_delete(ctx: ServiceContext, session: Session, kind: str, name: str, principal: Principal) -> dict | None:
    """Deleting a governed object loosens it as much as anything can: when a policy holds
    changes of it, the delete becomes a request (returned) and nothing is deleted yet."""
    kind = resolve_kind(kind)
    if kind not in GOVERNED:
        return None
    inv = load_inventory(ctx, session)
    current = inv.by_kind(kind).get(name)
    if current is None:
        return None  # the delete answers 404 as usual
    verdict, tenant = _object_verdict(_policies(inv), principal, kind, name, current, None)
    if not verdict.needed:
        return None
    row = _hold(ctx, session, principal, current, verdict, tenant, "delete")
    return {"kind": kind, "name": name, "action": "held for approval", "operation": "delete", "id": row.id}


def _object_verdict(
    policies: list[ApprovalPolicySpec], principal: Principal, kind: str, name: str, current: BaseModel | None, new: BaseModel | None
) -> tuple[ApprovalVerdict, str]:
    """The policies' verdict on changing `current` into `new` (None: deleted), for every
    tenant the object belongs to before or after, and the tenant the request is filed
    under: the nearest tenant above all of them ('' for an object of every tenant)."""
    tenants = list(dict.fromkeys(getattr(o, "tenant", None) or "" for o in (current, new) if o is not None))
    loose = loosens(current, new)
    by_admin = holds_role(principal, "platform-admin")
    operation = "delete" if new is None else "apply"
    verdicts = [
        evaluate(
            policies,
            ApprovalContext(kind=GOVERNED[kind], tenant=t, by_platform_admin=by_admin, object_name=name, operation=operation, loosens=loose),
        )
        for t in tenants
    ]
    verdict = _merge([v for v in verdicts if v.needed])
    if GOVERNED[kind] in PLATFORM_DECIDED:
        verdict = ApprovalVerdict(verdict.reasons, verdict.policies, (), verdict.expire_after)  # named approvers decide tasks and quotas
    return verdict, _common_tenant(tenants)


def _merge(verdicts: list[ApprovalVerdict]) -> ApprovalVerdict:
    if len(verdicts) <= 1:
        return verdicts[0] if verdicts else ApprovalVerdict()
    reasons: list[Reason] = []
    for r in (r for v in verdicts for r in v.reasons):
        if r not in reasons:
            reasons.append(r)
    return ApprovalVerdict(
        tuple(reasons),
        tuple(dict.fromkeys(p for v in verdicts for p in v.policies)),
        tuple(sorted({a for v in verdicts for a in v.approvers})),
        min((v.expire_after for v in verdicts if v.expire_after), key=parse_duration, default=None),
    )


def _common_tenant(tenants: list[str]) -> str:
    if "" in tenants or not tenants:
        return ""
    parts = [t.split("/") for t in tenants]
    common = []
    for level in zip(*parts, strict=False):
        if len(set(level)) > 1:
            break
        common.append(level[0])
    return "/".join(common)


def _hold(
    ctx: ServiceContext, session: Session, principal: Principal, spec: BaseModel, verdict: ApprovalVerdict, tenant: str, operation: str
) -> ApprovalRow:
    reason = spec.labels.get(APPROVAL_REASON_LABEL, "") if operation == "apply" else ""
    row = _open(ctx, session, kind=GOVERNED[spec.kind], tenant=tenant, verdict=verdict, actor=principal.name, reason=reason)
    row.document, row.operation = spec_to_document(spec), operation
    session.flush()
    _audit(session, principal.name, "approval.request", row, before=None, ts=row.created_at)
    return row


def _apply_held(ctx: ServiceContext, session: Session, row: ApprovalRow, actor: str) -> None:
    kind = OBJECT_KIND[row.kind]
    if row.operation == "delete":
        try:
            delete_object(ctx, session, kind, row.document["name"], actor)
        except NotFoundError:
            raise ConflictError(f"{kind} {row.document['name']!r} no longer exists; there is nothing left to delete for {row.id}") from None
        return
    try:
        spec = SPEC_KINDS[kind].model_validate(row.document)
    except ValidationError as exc:
        # Held before a limit existed (or written by hand): approving it would store an
        # object that no longer validates. Refuse with the reason; the requester re-applies.
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()[:3])
        raise ConflictError(f"the change held by {row.id} no longer validates ({problems}); reject it and apply a valid one") from None
    apply_specs(ctx, session, [spec], actor)


# ------------------------------------------------------------------------- decisions
def decide(ctx: ServiceContext, session: Session, approval_id: str, principal: Principal, *, approve: bool, comment: str) -> ApprovalRow:
    """Approve or reject. Raises duties.SeparationOfDutiesError when the caller's role
    would do but it is no second person for this request (the caller audits that)."""
    row = get_row(session, approval_id, principal, for_update=True)
    if row.requested_by == principal.name:  # the plainest refusal first: "not your own"
        duties.check(session, principal, row)
    check_may_decide(principal, row)
    if row.state != PENDING:
        raise ConflictError(f"approval {row.id} was already decided ({row.state}{f' by {row.decided_by}' if row.decided_by else ''})")
    now = ctx.clock.now()
    if row.expires_at <= now:
        raise ConflictError(f"approval {row.id} expired at {iso_utc(row.expires_at)}; it can no longer be decided")
    duty = duties.check(session, principal, row)
    comment = comment.strip()
    if not approve and not comment:
        raise SpecError("comment: a rejection needs a comment saying why", details=[{"loc": "comment", "msg": "required to reject"}])
    task = _task_of(session, row)
    if task is not None and task.state != TaskState.PENDING_APPROVAL.value:
        raise ConflictError(f"task {task.id} is no longer waiting for approval ({task.state})")
    before = _state_view(row)
    row.state, row.decided_by, row.decided_at, row.comment = (APPROVED if approve else REJECTED), principal.name, now, comment
    if row.kind in OBJECT_KIND and approve:
        _apply_held(ctx, session, row, principal.name)
    if task is not None:
        _decide_task(ctx, session, row, task, principal.name, approve, comment)
    # A lone platform-admin deciding its own request is allowed (nobody else to ask) and said so.
    extra = {"sole_platform_admin_own_request": True} if duty.sole_admin_own_request else None
    _audit(session, principal.name, "approval.approve" if approve else "approval.reject", row, before=before, ts=now, extra=extra)
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
    """Who may decide by role: named approvers, tenant-admins of the tenant or above and
    platform-admins; a Budget or ApprovalPolicy change, platform-admins only (they alone
    may make it). Who may not, whatever the role, is services.duties (see may_decide)."""
    admin = holds_role(principal, "platform-admin")
    if row.kind in PLATFORM_DECIDED and not admin:
        raise PermissionDeniedError(f"deciding {row.id} (a change of a {OBJECT_KIND[row.kind]}) needs platform-admin")
    if admin or principal.name in (row.approvers or []):
        return
    require(principal, "approval.decide", row.tenant)
    if not holds_role(principal, "tenant-admin", row.tenant):
        named = f", or one of {', '.join(row.approvers)}" if row.approvers else ""
        raise PermissionDeniedError(f"deciding {row.id} needs tenant-admin on {row.tenant} or above, platform-admin{named}")


def may_decide(session: Session, principal: Principal, row: ApprovalRow, known: duties.Vouches | None = None) -> bool:
    """Both checks, as a yes/no for views (`known`: vouches loaded once for a list)."""
    try:
        check_may_decide(principal, row)
    except PermissionDeniedError:
        return False
    return not duties.verdict_for(session, principal, row, known).refused


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
    return {"id": row.id, "reasons": row.reasons, "expires_at": iso_utc(row.expires_at), "approvers": row.approvers}


def approval_dict(row: ApprovalRow) -> dict:
    return {
        "id": row.id,
        "kind": row.kind,
        "operation": row.operation or "apply",
        "state": row.state,
        "tenant": row.tenant,
        "task_id": row.task_id,
        "document": row.document,
        "reasons": row.reasons,
        "reason": row.reason,
        "policies": row.policies,
        "approvers": row.approvers,
        "requested_by": row.requested_by,
        "created_at": iso_utc(row.created_at),
        "expire_after": row.expire_after,
        "expires_at": iso_utc(row.expires_at),
        "decided_by": row.decided_by,
        "decided_at": iso_utc(row.decided_at),
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


def _audit(session: Session, actor: str, action: str, row: ApprovalRow, *, before: dict | None, ts: datetime, extra: dict | None = None) -> None:
    after = {"state": row.state, "kind": row.kind, "tenant": row.tenant, "reasons": row.reasons, **(extra or {})}
    if row.kind in OBJECT_KIND:
        after["operation"] = row.operation or "apply"
    after.update({k: v for k, v in (("task_id", row.task_id), ("reason", row.reason), ("comment", row.comment)) if v})
    if row.decided_by:
        after["decided_by"] = row.decided_by
    if row.kind in OBJECT_KIND and action == "approval.request":
        after["document"] = row.document
    audit.record(session, actor=actor, action=action, object_kind="Approval", object_id=row.id, before=before, after=after, ts=ts)
