"""Parsing of human-written quantities: durations ("6h", "90m", "1d2h") and sizes."""

from __future__ import annotations

import math
import re
from typing import Annotated

from pydantic import AfterValidator

from hetpool.core.limits import MAX_ANY_DURATION_S, MAX_DURATION_S, format_limit_s

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | int | float, *, max_s: float = MAX_ANY_DURATION_S) -> float:
    """Seconds in `value`: a number of seconds or a string such as "6h", "1h30m", "45s".

    Anything longer than `max_s` (and NaN or infinity) is refused: "now + duration" must
    stay a valid date (see core/limits.py)."""
    try:
        seconds = _parse_duration(value)
    except OverflowError:  # an integer too large for a float
        seconds = math.inf
    if not math.isfinite(seconds) or seconds > max_s:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise ValueError(f"duration {shown} is longer than the limit of {format_limit_s(max_s)}")
    return seconds


def check_duration(value: str | None, max_s: float = MAX_DURATION_S) -> str | None:
    """A duration text no longer than `max_s` (a spec's limit), returned unchanged."""
    if value is not None:
        parse_duration(value, max_s=max_s)
    return value


# A duration field of a spec: text such as "6h" or "1d2h", at most MAX_DURATION_S (366 days).
Duration = Annotated[str, AfterValidator(check_duration)]


def _parse_duration(value: str | int | float) -> float:
    if isinstance(value, bool):
        raise ValueError("expected a duration such as '6h', '90m' or a number of seconds")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError("a duration cannot be negative")
        return float(value)
    text = value.strip().lower().replace(" ", "")
    if not text:
        raise ValueError("expected a duration such as '6h', '90m' or a number of seconds")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return float(text)
    total, pos = 0.0, 0
    for match in _DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text):
        raise ValueError(f"invalid duration {value!r}: use a number with a unit s, m, h or d (e.g. '6h', '1h30m')")
    return total


def format_duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, sec = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s" if sec else f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours}h" if hours else f"{days}d"
