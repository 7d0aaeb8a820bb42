"""Cost: prices, the usage ledger, chargeback reports and budgets.

The ledger is written by the cost worker (hetpool.server.workers.cost); everything here
reads it. Reports sum ledger rows in SQL with the keys of hetpool.governance.cost, so a
report's total is the sum of the ledger rows of its period, to the micro-unit.

INTERFACE used by approvals and submission:
  budget_exceeded(ctx, session, inv, tenant) -> str | None   why the tenant (or an ancestor)
                                                             is over its budget this period, or None.
  budget_hard_stop(ctx, session, inv, tenant) -> str | None  the same, for budgets with
                                                             hard_stop: true only (refuse the task).
"""

from __future__ import annotations

from datetime import date, datetime

from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from hetpool.core.clock import iso_utc
from hetpool.core.errors import SpecError
from hetpool.core.governance import BudgetSpec
from hetpool.governance.cost import (
    DIMENSIONS,
    Period,
    Sums,
    assemble_report,
    budget_applies,
    crossed_alerts,
    current_period,
    from_micros,
    over_budget,
    parse_period,
    to_micros,
)
from hetpool.server.db.models_cost import BudgetAlertRow, CostLedgerRow
from hetpool.server.services import audit
from hetpool.server.services.context import ServiceContext
from hetpool.server.services.inventory import Inventory

ACTOR = "cost"


def period_of(text: str | None, now: datetime) -> Period:
    """The period a user asked for; the current month when none."""
    if not text:
        return current_period("month", now)
    try:
        return parse_period(text)
    except ValueError as exc:
        raise SpecError(str(exc), details=[{"loc": "period", "msg": str(exc)}]) from None


def _in_subtrees(column, roots: list[str]):
    return or_(*[(column == root) | column.startswith(root + "/", autoescape=True) for root in roots])


def _filtered(stmt, period: Period, tenant: str | None, scopes: list[str] | None, task_id: str | None = None):
    """Rows of the period, of `tenant`'s subtree, within the caller's visible subtrees."""
    stmt = stmt.where(CostLedgerRow.day >= period.start, CostLedgerRow.day < period.end)
    if tenant:
        stmt = stmt.where(_in_subtrees(CostLedgerRow.tenant, [tenant]))
    if scopes is not None:
        stmt = stmt.where(_in_subtrees(CostLedgerRow.tenant, scopes) if scopes else CostLedgerRow.id.is_(None))
    if task_id:
        stmt = stmt.where(CostLedgerRow.task_id == task_id)
    return stmt


def _sums_columns():
    return (
        func.coalesce(func.sum(CostLedgerRow.cost_micros), 0),
        func.coalesce(func.sum(CostLedgerRow.device_hours), 0.0),
        func.coalesce(func.sum(CostLedgerRow.cpu_core_hours), 0.0),
        func.coalesce(func.sum(CostLedgerRow.memory_gib_hours), 0.0),
        func.count(CostLedgerRow.id),
        func.count(func.distinct(CostLedgerRow.task_id)),
    )


def _sums(key: str, currency: str, values) -> Sums:
    micros, device_h, cpu_h, mem_h, rows, tasks = values
    return Sums(key, currency, int(micros), float(device_h), float(cpu_h), float(mem_h), int(rows), int(tasks))


def report(session: Session, *, by: str, period: Period, tenant: str | None = None, scopes: list[str] | None = None) -> dict:
    """Totals per group (`by`: a dimension of hetpool.governance.cost.DIMENSIONS) and per currency."""
    if by not in DIMENSIONS:
        raise SpecError(f"by: cannot group by {by!r}; use one of {', '.join(DIMENSIONS)}", details=[{"loc": "by", "msg": "unknown dimension"}])
    key = getattr(CostLedgerRow, DIMENSIONS[by])
    grouped = session.execute(
        _filtered(select(key, CostLedgerRow.currency, *_sums_columns()), period, tenant, scopes).group_by(key, CostLedgerRow.currency)
    )
    groups = [_sums(k or "-", currency, values) for k, currency, *values in grouped]
    per_currency = session.execute(
        _filtered(select(CostLedgerRow.currency, *_sums_columns()), period, tenant, scopes).group_by(CostLedgerRow.currency)
    )
    totals = [_sums("total", currency, values) for currency, *values in per_currency]
    return {**period.to_dict(), "tenant": tenant, **assemble_report(by, groups, totals)}


def ledger_dict(row: CostLedgerRow) -> dict:
    return {
        "id": row.id,
        "task_id": row.task_id,
        "attempt": row.attempt,
        "rank": row.rank,
        "day": row.day.isoformat() if isinstance(row.day, date) else str(row.day),
        "interval_start": iso_utc(row.interval_start),
        "interval_end": iso_utc(row.interval_end),
        "tenant": row.tenant,
        "org": row.org,
        "team": row.team,
        "project": row.project,
        "env": row.env,
        "type": row.task_type,
        "pool": row.pool,
        "cluster": row.cluster,
        "backend": row.backend,
        "model": row.model,
        "node": row.node,
        "devices": row.devices,
        "cpu": row.cpu,
        "memory_gb": row.memory_gb,
        "seconds": round(row.seconds, 6),
        "device_hours": round(row.device_hours, 6),
        "cpu_core_hours": round(row.cpu_core_hours, 6),
        "memory_gib_hours": round(row.memory_gib_hours, 6),
        "cost": from_micros(row.cost_micros),
        "cost_micros": row.cost_micros,
        "currency": row.currency,
    }


def ledger(
    session: Session,
    *,
    period: Period,
    tenant: str | None = None,
    task_id: str | None = None,
    scopes: list[str] | None = None,
    limit: int = 1000,
    offset: int = 0,
) -> dict:
    """Ledger rows of the period (oldest day first), a page at a time, with the count and
    cost of all matching rows so that a page can be checked against the whole."""
    stmt = _filtered(select(CostLedgerRow), period, tenant, scopes, task_id)
    rows = session.execute(
        stmt.order_by(CostLedgerRow.day, CostLedgerRow.task_id, CostLedgerRow.attempt, CostLedgerRow.rank, CostLedgerRow.id)
        .limit(limit)
        .offset(offset)
    )
    count_stmt = _filtered(
        select(CostLedgerRow.currency, func.count(CostLedgerRow.id), func.coalesce(func.sum(CostLedgerRow.cost_micros), 0)),
        period,
        tenant,
        scopes,
        task_id,
    )
    per_currency = {currency: (int(n), int(micros)) for currency, n, micros in session.execute(count_stmt.group_by(CostLedgerRow.currency))}
    return {
        **period.to_dict(),
        "tenant": tenant,
        "count": sum(n for n, _ in per_currency.values()),
        "cost_by_currency": {c: from_micros(m) for c, (_, m) in sorted(per_currency.items())},
        "offset": offset,
        "rows": [ledger_dict(r) for r in rows.scalars()],
    }


# ----------------------------------------------------------------------------- budgets
def budgets(inv: Inventory) -> list[BudgetSpec]:
    return sorted(inv.by_kind("Budget").values(), key=lambda b: (b.tenant, b.name))


def spent_micros(session: Session, budget: BudgetSpec, period: Period) -> int:
    stmt = _filtered(select(func.coalesce(func.sum(CostLedgerRow.cost_micros), 0)), period, budget.tenant, None)
    if budget.currency:
        stmt = stmt.where(CostLedgerRow.currency == budget.currency)
    return int(session.execute(stmt).scalar_one())


def _raised(session: Session, budget: BudgetSpec, period: Period) -> list[BudgetAlertRow]:
    stmt = select(BudgetAlertRow).where(BudgetAlertRow.budget == budget.name, BudgetAlertRow.period == period.name)
    return list(session.execute(stmt.order_by(BudgetAlertRow.threshold)).scalars())


def _currency(session: Session, budget: BudgetSpec, period: Period) -> str:
    if budget.currency:
        return budget.currency
    stmt = _filtered(select(CostLedgerRow.currency).distinct(), period, budget.tenant, None)
    found = sorted(session.execute(stmt).scalars())
    return found[0] if len(found) == 1 else ("mixed" if found else "")


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root + "/")


def _visible(budget_tenant: str, tenant: str | None, scopes: list[str] | None) -> bool:
    # A tenant sees the budgets of its subtree and those of its ancestors (which cover it).
    if tenant and not (_under(budget_tenant, tenant) or _under(tenant, budget_tenant)):
        return False
    return scopes is None or any(_under(budget_tenant, s) for s in scopes)


def _invalid_budgets(inv: Inventory, tenant: str | None, scopes: list[str] | None) -> list[dict]:
    """Stored budgets that no longer validate (see load_inventory): listed with the reason,
    counting nothing, so that their readers learn why instead of getting an error."""
    out = []
    for (kind, name), bad in sorted(inv.invalid.items()):
        owner = bad.get("tenant")
        if kind != "Budget" or not isinstance(owner, str) or not _visible(owner, tenant, scopes):
            continue
        out.append(
            {
                "name": name,
                "tenant": owner,
                "period": "-",
                "period_start": None,
                "period_end": None,
                "amount": 0.0,
                "currency": "",
                "spent": 0.0,
                "spent_micros": 0,
                "fraction": 0.0,
                "exceeded": False,
                "hard_stop": False,
                "alert_at": [],
                "alerts": [],
                "invalid": f"stored spec is invalid and counts nothing until applied again: {bad['error']}",
            }
        )
    return out


def budget_status(session: Session, inv: Inventory, now: datetime, *, tenant: str | None = None, scopes: list[str] | None = None) -> list[dict]:
    """Each budget (of `tenant`'s subtree, within `scopes`): spent this period vs its amount."""
    out = []
    for budget in budgets(inv):
        if not _visible(budget.tenant, tenant, scopes):
            continue
        period = current_period(budget.period, now)
        spent = spent_micros(session, budget, period)
        out.append(
            {
                "name": budget.name,
                "tenant": budget.tenant,
                "period": period.name,
                "period_start": period.start.isoformat(),
                "period_end": period.end.isoformat(),
                "amount": budget.amount,
                "currency": _currency(session, budget, period),
                "spent": from_micros(spent),
                "spent_micros": spent,
                "fraction": round(spent / to_micros(budget.amount), 6),
                "exceeded": over_budget(budget, spent),
                "hard_stop": budget.hard_stop,
                "alert_at": budget.alert_at,
                "alerts": [
                    {"threshold": a.threshold, "spent": from_micros(a.spent_micros), "raised_at": iso_utc(a.raised_at)}
                    for a in _raised(session, budget, period)
                ],
            }
        )
    return out + _invalid_budgets(inv, tenant, scopes)


def raise_alerts_of(session: Session, budget: BudgetSpec, now: datetime) -> list[dict]:
    """Record each alert fraction one budget's spend has reached this period, once: a row
    (unique per budget, period and fraction) and a `budget.alert` audit event. The worker
    runs each budget in its own transaction, so that one that fails holds back no other
    tenant's alerts."""
    raised = []
    period = current_period(budget.period, now)
    spent = spent_micros(session, budget, period)
    for threshold in crossed_alerts(budget, spent, [a.threshold for a in _raised(session, budget, period)]):
        currency = _currency(session, budget, period)
        alert = BudgetAlertRow(
            budget=budget.name,
            tenant=budget.tenant,
            period=period.name,
            threshold=threshold,
            amount=budget.amount,
            spent_micros=spent,
            currency=currency,
            raised_at=now,
        )
        session.add(alert)
        after = {
            "tenant": budget.tenant,
            "period": period.name,
            "threshold": threshold,
            "amount": budget.amount,
            "spent": from_micros(spent),
            "currency": currency,
            "hard_stop": budget.hard_stop,
        }
        audit.record(session, actor=ACTOR, action="budget.alert", object_kind="Budget", object_id=budget.name, after=after, ts=now)
        raised.append({"budget": budget.name, **after})
    session.flush()
    return raised


def _over(ctx: ServiceContext, session: Session, inv: Inventory, tenant: str, *, hard_stop_only: bool) -> str | None:
    now = ctx.clock.now()
    for budget in budgets(inv):
        if not budget_applies(budget, tenant) or (hard_stop_only and not budget.hard_stop):
            continue
        period = current_period(budget.period, now)
        spent = spent_micros(session, budget, period)
        if over_budget(budget, spent):
            currency = budget.currency or _currency(session, budget, period)
            return (
                f"budget {budget.name!r} of {budget.tenant} is spent: {from_micros(spent):.2f} of {budget.amount:.2f} {currency}"
                f" this {budget.period} ({period.name})"
            )
    return None


def budget_exceeded(ctx: ServiceContext, session: Session, inv: Inventory, tenant: str) -> str | None:
    """Why `tenant` (through its own budget or an ancestor's) is over budget this period, or None."""
    return _over(ctx, session, inv, tenant, hard_stop_only=False)


def budget_hard_stop(ctx: ServiceContext, session: Session, inv: Inventory, tenant: str) -> str | None:
    """Why new tasks of `tenant` must be refused (a hard_stop budget is spent), or None."""
    return _over(ctx, session, inv, tenant, hard_stop_only=True)
