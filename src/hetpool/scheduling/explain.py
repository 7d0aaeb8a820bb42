"""Human explanations of placement outcomes: a summary line, reason counts and attempts.

The summary reads like kube-scheduler's: "0/412 nodes available: 300 incompatible
software stack: …, 80 not enough free devices, 32 pool reserved for other tenants".
"""

from __future__ import annotations

from hetpool.scheduling.assign import Assignment


def summarize(assignment: Assignment, fits_when_idle: bool, nodes: int | None = None) -> str:
    if assignment.feasible:
        first = assignment.placements[0]
        how = f"fallback to {assignment.chosen}" if assignment.fallback_used else f"on {assignment.chosen}"
        return f"fits now {how}: {len(assignment.placements)} worker(s), first on {first.node} ({first.model})"
    counts = ", ".join(f"{count} {reason}" for reason, count in assignment.reasons.most_common(4)) or "no candidates"
    head = f"0/{nodes} nodes available: " if nodes is not None else ""
    if not fits_when_idle:
        return f"cannot run anywhere, even on idle capacity — {head}{counts}"
    return f"waiting for capacity — {head}{counts}"


def explanation(assignment: Assignment, fits_when_idle: bool, nodes: int | None = None) -> dict:
    return {
        "summary": summarize(assignment, fits_when_idle, nodes),
        "fits_when_idle": fits_when_idle,
        "reasons": dict(assignment.reasons),
        "attempts": [a.to_dict() for a in assignment.attempts],
    }
