"""How often the start-time forecast runs (`policy.estimate_interval`), and what it owes.

The forecast (forecast.py) is information, not a decision: it walks the running work's ends
and the first `estimate_horizon` waiting tasks, a tenth of a cycle on a large estate, and
nothing the scheduler decides reads it. Slurm's backfill scheduler recomputes the start
times it shows every `bf_interval` (30 s by default); so does this. A cycle is *due* to
forecast when none is kept yet (the first cycle, a new leader, a what-if cycle), the
interval is 0, the clock went back, the horizon or the policy changed, or the interval has
passed. In between, each waiting task keeps what the last forecast said of it, dated by
`estimated_at` (forecast.attach_estimates).

A task the last forecast did not cover (queued since, within the horizon) is told
"pending" until the next one. It may be parked meanwhile (parking.py: nothing it could use
changed), and a parked task is not decided, so its explanation would say "pending" until
capacity frees for it. So the pending tasks are remembered here, and the next due cycle
lets them go once: it decides them again (the same decision parking would have kept) and
the forecast it runs covers them. Nothing else about parking changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

LAST_FORECAST_KEY = "last_forecast"  # in Snapshot.parking, the scheduler's memory between cycles
UNESTIMATED_KEY = "unestimated"  # ids told "pending": let go of parking by the next due cycle


@dataclass(frozen=True)
class LastForecast:
    """What the last forecast said: when it ran, under which horizon and policy, and per
    task its start and pool (None: beyond the horizon), or the error that kept it out."""

    at: datetime
    horizon: int
    policy: object  # the SchedulingPolicySpec it ran under: another policy, another forecast
    starts: dict[str, tuple[datetime | None, str | None]]
    errors: dict[str, str]


def forecast_due(parking: dict, now: datetime, policy) -> bool:
    """Whether a cycle at `now` under `policy` runs the forecast (see the module's text)."""
    last: LastForecast | None = parking.get(LAST_FORECAST_KEY)
    if last is None or policy.estimate_interval_s <= 0 or now < last.at or last.horizon != policy.estimate_horizon:
        return True
    if last.policy is not policy and last.policy != policy:
        return True
    return (now - last.at).total_seconds() >= policy.estimate_interval_s


def unestimated(parking: dict, due: bool) -> frozenset[str]:
    """The parked tasks a due cycle lets go so that its forecast covers them (none otherwise)."""
    return frozenset(parking.get(UNESTIMATED_KEY, ())) if due else frozenset()


def owe(parking: dict, due: bool, pending: set[str], decided: set[str], queued) -> None:
    """After a cycle: remember the tasks told "pending" in it. A due cycle settles what it
    decided; a pending task it did not reach (the head budget) stays owed while it is queued
    (`queued`: a container of the queue's task ids)."""
    owed = set(parking.get(UNESTIMATED_KEY, ()))
    if due:
        owed -= decided
    owed = {task_id for task_id in owed if task_id in queued} | pending
    if owed:
        parking[UNESTIMATED_KEY] = owed
    else:
        parking.pop(UNESTIMATED_KEY, None)
