"""What the scheduling core tells a quota book, and what it asks of one.

The book itself lives in hetpool.governance.quota (QuotaBook); the core only calls it
through the `QuotaLedger` protocol below, so that the live scheduler and the simulator
hand `run_cycle` the same kind of object, and so that a cycle can be read without knowing
how quotas are accounted.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol

from hetpool.core.tasks import TaskSpec


@dataclass(frozen=True)
class Held:
    """Capacity one worker holds (or would hold): where, and how much."""

    pool: str
    model: str
    devices: float  # whole devices, or the fraction of one
    cpu: float
    memory_gb: float


@dataclass(frozen=True)
class QuotaCeiling:
    """A quota that a task can never be admitted under as it stands: even with its whole
    cohort idle and lending, `requested` is above nominal + what it may borrow."""

    quota: str
    resource: str
    requested: float
    nominal: float
    borrowing_limit: float | None  # None: unlimited (bounded by what siblings can lend)
    borrowable: float  # the most it could borrow: min(borrowing_limit, what siblings can lend at most)

    def to_dict(self) -> dict:
        return {
            "quota": self.quota,
            "resource": self.resource,
            "requested": self.requested,
            "nominal": self.nominal,
            "borrowing_limit": self.borrowing_limit,
            "borrowable": self.borrowable,
        }


class QuotaVerdictLike(Protocol):
    ok: bool
    borrowing: bool
    reason: str


class QuotaLedger(Protocol):
    """The quota book as the cycle uses it (see governance.quota.QuotaBook)."""

    def __bool__(self) -> bool: ...

    def check(self, spec: TaskSpec, held: list[Held]) -> QuotaVerdictLike: ...

    def ceiling(self, spec: TaskSpec, held: Iterable[Held]) -> QuotaCeiling | None: ...

    def never_exceeds(self, spec: TaskSpec) -> bool: ...  # True: no placement could pass a ceiling (from the request alone)

    def charge(self, task_id: str, spec_or_facts, held: list[Held], *, exempt: bool = False) -> object: ...

    def release(self, task_id: str) -> None: ...

    def is_borrowing(self, task_id: str) -> bool: ...

    def reclaimable_by(self, spec: TaskSpec, victim_id: str) -> bool: ...

    def charged_tenant(self, task_id: str) -> str | None: ...

    def saved(self) -> object: ...  # the charges, opaque: handed back to `restore`

    def restore(self, state: object) -> None: ...

    def state_key(self, spec: TaskSpec, pools: Iterable[tuple[str, str]]) -> tuple: ...  # what `check` reads for `spec` on those (pool, model)s

    def without(self, task_ids: Iterable[str]) -> AbstractContextManager[QuotaLedger]: ...  # as if released; restored on exit
