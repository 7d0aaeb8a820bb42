"""Human explanations of placement outcomes: a summary line, reason counts and attempts."""

from __future__ import annotations

from hetpool.core.units import format_duration
from hetpool.scheduling.assign import Assignment


def summarize(assignment: Assignment, fits_when_idle: bool) -> str:
    if assignment.feasible:
        first = assignment.placements[0]
        how = f"fallback to {assignment.chosen}" if assignment.fallback_used else f"on {assignment.chosen}"
        return f"fits now {how}: {len(assignment.placements)} worker(s), first on {first.node} ({first.model})"
    top = assignment.reasons.most_common(3)
    why = "; ".join(f"{reason} ({count})" for reason, count in top) or "no candidates"
    if not fits_when_idle:
        return f"cannot run anywhere, even on idle capacity: {why}"
    return f"waiting for capacity: {why}"


def explanation(assignment: Assignment, fits_when_idle: bool) -> dict:
    return {
        "summary": summarize(assignment, fits_when_idle),
        "fits_when_idle": fits_when_idle,
        "reasons": dict(assignment.reasons),
        "attempts": [a.to_dict() for a in assignment.attempts],
    }


def describe_runtime(seconds: float | None) -> str:
    return format_duration(seconds)
