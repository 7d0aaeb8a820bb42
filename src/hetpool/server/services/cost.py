"""Cost: prices, the usage ledger, chargeback reports and budgets.

INTERFACE used by approvals and submission:
  budget_exceeded(ctx, session, inv, tenant) -> str | None   why the tenant (or an ancestor)
                                                             is over its budget this period, or None.
"""

from __future__ import annotations


def budget_exceeded(ctx, session, inv, tenant: str) -> str | None:
    """Placeholder until the cost ledger lands: never over budget."""
    return None
