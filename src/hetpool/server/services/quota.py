"""Quota accounting on the server side (usage from the database, the pure rules in
hetpool.governance.quota).

INTERFACE used by approvals:
  over_quota(ctx, session, inv, spec) -> str | None   why `spec` would exceed its quota even
                                                      with borrowing, or None if it fits.
"""

from __future__ import annotations


def over_quota(ctx, session, inv, spec) -> str | None:
    """Placeholder until quota accounting lands: never over quota."""
    return None
