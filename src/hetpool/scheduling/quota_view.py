"""What the scheduling core tells a quota book about a placement. The book itself lives in
hetpool.governance.quota; the core only calls it (check, charge, release, reclaimable_by)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    """Capacity one worker holds (or would hold): where, and how much."""

    pool: str
    model: str
    devices: float  # whole devices, or the fraction of one
    cpu: float
    memory_gb: float
