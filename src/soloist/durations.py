"""Parsing of human durations such as ``"90s"``, ``"5m"``, ``"1h30m"``, or ``timedelta``."""

from __future__ import annotations

import re
from datetime import timedelta

from soloist.errors import ConfigError

_UNITS = {
    "ms": 0.001,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
#: The longest duration accepted, 1000 years (the store core's longest delay): a time of
#: this millennium plus or minus it stays a datetime, and no delay, timeout or age needs more.
MAX_DURATION = timedelta(days=365_250)


def parse_duration(value: object, *, what: str = "duration", allow_zero: bool = False) -> timedelta:
    """Return ``value`` as a timedelta.

    Accepts a ``timedelta``, a number of seconds, or a string made of ``<number><unit>``
    parts (units ``ms s m h d w``), e.g. ``"90s"``, ``"5m"``, ``"1h30m"``, ``"0.5s"``.
    Raises :class:`ConfigError` naming the value otherwise, or when it is negative (or zero
    unless ``allow_zero``), or longer than :data:`MAX_DURATION` (1000 years).
    """
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, bool):
        raise ConfigError(f"invalid {what} {value!r}: expected e.g. '90s', '5m' or a timedelta")
    elif isinstance(value, (int, float)):
        delta = _seconds(value, float(value), what)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        pos = 0
        seconds = 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if not text or pos != len(text):
            raise ConfigError(
                f"invalid {what} {value!r}: expected a duration such as '90s', '5m', '1h30m'"
            )
        delta = _seconds(value, seconds, what)
    else:
        raise ConfigError(
            f"invalid {what} {value!r}: expected a string such as '90s', a number of "
            "seconds or a timedelta"
        )
    if delta < timedelta(0) or (delta == timedelta(0) and not allow_zero):
        raise ConfigError(f"invalid {what} {value!r}: must be positive")
    if delta > MAX_DURATION:
        raise ConfigError(f"invalid {what} {value!r}: expected at most 1000 years")
    return delta


def _seconds(value: object, seconds: float, what: str) -> timedelta:
    """``seconds`` as a timedelta; ConfigError naming ``value`` when it is not a finite
    number that a timedelta holds (``nan``, ``inf``, ``99999999999d``)."""
    try:
        return timedelta(seconds=seconds)
    except (OverflowError, ValueError):
        raise ConfigError(
            f"invalid {what} {value!r}: expected a finite duration of at most 1000 years"
        ) from None
