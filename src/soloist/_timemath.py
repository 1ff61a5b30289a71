"""Time arithmetic for schedules: parsing instants, zone offset changes, wall times.

Pure functions, no clock reads; split from :mod:`soloist.schedules` to keep each module
about one thing. See that module's docstring for the daylight-saving rule they implement.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from soloist.errors import ScheduleError

_UTC = timezone.utc
_DATE_ONLY = re.compile(r"\d{4}-\d{2}-\d{2}")


def micros(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def parse_rfc3339(text: str) -> datetime | None:
    """``text`` as a datetime (possibly naive), or None; ``Z`` works on Python 3.10 too."""
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        return None


def parse_instant(value: object, what: str) -> datetime | None:
    """``value`` as an aware UTC datetime; a date-only string is midnight UTC."""
    if value is None:
        return None
    parsed = value
    if isinstance(value, str):
        text = value.strip()
        parsed = parse_rfc3339(text + "T00:00:00Z" if _DATE_ONLY.fullmatch(text) else text)
    if not isinstance(parsed, datetime):
        raise ScheduleError(
            f"invalid {what} {value!r}: expected an aware datetime, an RFC 3339 string such "
            "as '2026-12-01T09:00:00+01:00', or a date such as '2027-01-01' (midnight UTC)"
        )
    if parsed.utcoffset() is None:
        raise ScheduleError(
            f"invalid {what} {value!r}: it has no UTC offset; give an aware datetime or a "
            "string with an offset such as '2026-12-01T09:00:00+01:00'"
        )
    try:
        return parsed.astimezone(_UTC)
    except OverflowError:  # its offset moves it past year 1 or 9999 in UTC
        raise ScheduleError(
            f"invalid {what} {value!r}: out of range; expected a time from year 1 to 9999 in UTC"
        ) from None


def offset_change(zone: ZoneInfo, lo: datetime, hi: datetime) -> datetime | None:
    """First instant in ``(lo, hi]`` whose UTC offset in ``zone`` differs from ``lo``'s."""
    base = lo.astimezone(zone).utcoffset()
    cursor = lo
    while cursor < hi:
        probe = min(cursor + timedelta(days=1), hi)
        if probe.astimezone(zone).utcoffset() != base:
            same, other = 0, micros(probe - cursor)
            while other - same > 1:
                mid = (same + other) // 2
                mid_offset = (cursor + timedelta(microseconds=mid)).astimezone(zone).utcoffset()
                same, other = (mid, other) if mid_offset == base else (same, mid)
            return cursor + timedelta(microseconds=other)
        cursor = probe
    return None


def wall_to_instant(wall: datetime, zone: ZoneInfo) -> datetime:
    """Naive wall time -> instant: first pass if ambiguous, transition if imaginary."""
    instant = wall.replace(tzinfo=zone, fold=0).astimezone(_UTC)
    if instant.astimezone(zone).replace(tzinfo=None) == wall:
        return instant
    # In a gap, fold=1 reads the wall time with the later offset: an instant before the
    # transition; fold=0 (above) gives one after it. The transition lies between.
    before = wall.replace(tzinfo=zone, fold=1).astimezone(_UTC)
    return offset_change(zone, before, instant) or instant


def format_duration(delta: timedelta) -> str:
    us = micros(delta)
    for unit, size in (("d", 86_400_000_000), ("h", 3_600_000_000), ("m", 60_000_000)):
        if us % size == 0:
            return f"{us // size}{unit}"
    if us % 1_000_000 == 0:
        return f"{us // 1_000_000}s"
    return f"{us // 1000}ms" if us % 1000 == 0 else f"{us / 1e6:g}s"
