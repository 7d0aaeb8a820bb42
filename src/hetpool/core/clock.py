"""An injectable clock, so that schedulers, workers and tests agree on 'now'."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class Clock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock(Clock):
    """A clock that moves only when told to (tests, the simulator)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> datetime:
        self._now += timedelta(seconds=seconds)
        return self._now


def as_utc(ts: datetime | None) -> datetime | None:
    """`ts` as an aware UTC datetime; a naive one is taken to be UTC already. For values
    that do not come from a database column (those are aware UTC already, see
    server/db/types.py): parsed input, a caller's `now`."""
    if ts is None:
        return None
    return ts.astimezone(UTC) if ts.tzinfo else ts.replace(tzinfo=UTC)


def iso_utc(ts: datetime | None) -> str | None:
    """ISO 8601 in UTC with a `Z`, as the API shows every time; None stays None."""
    ts = as_utc(ts)
    return ts.isoformat().replace("+00:00", "Z") if ts else None
