"""Separation of duties at decision time: the facts the pure rules of
hetpool.governance.duties need (who created which user, granted which binding, issued
which token; who is platform-admin), the refusal (403 `separation_of_duties`) and its
audit event, written in a transaction of its own since the refused one rolls back."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from hetpool.core.errors import PermissionDeniedError
from hetpool.governance.duties import CREATED, GRANTED, ISSUED_TOKEN, DecisionFacts, DutyVerdict, Vouch, check_duties
from hetpool.server.db.models import ApiTokenRow, UserRow
from hetpool.server.db.models_access import RoleBindingRow
from hetpool.server.db.models_approvals import ApprovalRow
from hetpool.server.services import audit
from hetpool.server.services.auth import Principal
from hetpool.server.services.context import ServiceContext


class SeparationOfDutiesError(PermissionDeniedError):
    """The caller's role would let it decide, but it is not a second person for this request."""

    code = "separation_of_duties"

    def __init__(self, approval_id: str, verdict: DutyVerdict) -> None:
        super().__init__(
            f"separation of duties: you may not decide {approval_id}: {verdict.message}",
            details=[{"loc": "approval", "msg": verdict.message or "", "rule": verdict.rule or ""}],
        )
        self.approval_id = approval_id
        self.rule = verdict.rule


@dataclass(frozen=True)
class Vouches:
    """Everything the rules may ask about, loaded once per call (a list of 200 requests in
    the inbox asks 200 times)."""

    platform_admins: frozenset[str]
    vouches: tuple[Vouch, ...]


def load_vouches(session: Session) -> Vouches:
    names = dict(session.execute(select(UserRow.id, UserRow.name)).all())
    vouches = [Vouch(by, CREATED, name) for name, by in session.execute(select(UserRow.name, UserRow.created_by).where(UserRow.created_by != ""))]
    admins = set()
    bindings = select(RoleBindingRow.user_id, RoleBindingRow.role, RoleBindingRow.tenant, RoleBindingRow.created_by)
    for user_id, role, tenant, by in session.execute(bindings):
        if user_id not in names:
            continue
        if role == "platform-admin" and not tenant:
            admins.add(names[user_id])
        if by:
            vouches.append(Vouch(by, GRANTED, names[user_id], tenant or None))
    issued = select(ApiTokenRow.user_id, ApiTokenRow.created_by).where(ApiTokenRow.created_by != "").distinct()
    vouches += [Vouch(by, ISSUED_TOKEN, names[user_id]) for user_id, by in session.execute(issued) if user_id in names]
    users = set(names.values())  # "system", "migration" and the like are no one who could act
    return Vouches(frozenset(admins), tuple(v for v in vouches if v.by in users))


def verdict_for(session: Session, principal: Principal, row: ApprovalRow, known: Vouches | None = None) -> DutyVerdict:
    known = known or load_vouches(session)
    facts = DecisionFacts(row.requested_by, principal.name, row.tenant, known.platform_admins, known.vouches)
    return check_duties(facts)


def check(session: Session, principal: Principal, row: ApprovalRow, known: Vouches | None = None) -> DutyVerdict:
    """The verdict when `principal` may decide `row`, else SeparationOfDutiesError."""
    verdict = verdict_for(session, principal, row, known)
    if verdict.refused:
        raise SeparationOfDutiesError(row.id, verdict)
    return verdict


def audit_refusal(ctx: ServiceContext, session: Session, principal: Principal, error: SeparationOfDutiesError) -> None:
    """A refused decision is evidence (someone tried to approve past the rules): keep it."""
    after = {"rule": error.rule, "message": error.message}
    audit.record(
        session, actor=principal.name, action="approval.refused", object_kind="Approval", object_id=error.approval_id, after=after, ts=ctx.clock.now()
    )
