"""Durations: parsing what people write and formatting for display."""

from __future__ import annotations

import pytest

from hetpool.core.units import format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("45s", 45),
        ("90m", 5400),
        ("6h", 21600),
        ("1d", 86400),
        ("1h30m", 5400),
        ("1d2h", 93600),
        ("1d2h3m4s", 93784),
        ("1.5h", 5400),
        ("0.5m", 30),
        ("6H", 21600),
        (" 1h 30m ", 5400),
        ("120", 120),
        ("2.5", 2.5),
        ("0s", 0),
        (30, 30),
        (1.5, 1.5),
        (0, 0),
    ],
)
def test_parse_duration(text: str | float, seconds: float) -> None:
    result = parse_duration(text)
    assert isinstance(result, float)
    assert result == seconds


@pytest.mark.parametrize("text", ["6x", "h6", "1h30", "six hours", "1h-30m", "-5", "-5s", "1.h", "m", "1h 30x"])
def test_parse_duration_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@pytest.mark.parametrize("value", ["", "   ", True, False])
def test_parse_duration_rejects_empty_and_bool(value) -> None:
    with pytest.raises(ValueError, match="expected a duration"):
        parse_duration(value)


@pytest.mark.parametrize("value", [-1, -0.5])
def test_parse_duration_rejects_negative_numbers(value: float) -> None:
    with pytest.raises(ValueError, match="cannot be negative"):
        parse_duration(value)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (None, "-"),
        (0, "0s"),
        (59, "59s"),
        (59.4, "59s"),
        (59.6, "1m"),
        (60, "1m"),
        (65, "1m05s"),
        (90, "1m30s"),
        (3599, "59m59s"),
        (3600, "1h"),
        (3660, "1h01m"),
        (5400, "1h30m"),
        (3601, "1h"),
        (47 * 3600 + 59 * 60, "47h59m"),
        (48 * 3600, "2d"),
        (49 * 3600, "2d1h"),
        (10 * 86400 + 5 * 3600, "10d5h"),
    ],
)
def test_format_duration(seconds: float | None, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0, 1, 59, 60, 61, 599, 600, 3599])
def test_format_then_parse_round_trips_below_one_hour(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds


@pytest.mark.parametrize("seconds", [3600, 5400, 86340, 48 * 3600, 49 * 3600, 30 * 86400])
def test_format_then_parse_round_trips_whole_minutes_and_hours(seconds: int) -> None:
    assert parse_duration(format_duration(seconds)) == seconds
