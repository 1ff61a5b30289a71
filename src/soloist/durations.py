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


def parse_duration(value: object, *, what: str = "duration", allow_zero: bool = False) -> timedelta:
    """Return ``value`` as a timedelta.

    Accepts a ``timedelta``, a number of seconds, or a string made of ``<number><unit>``
    parts (units ``ms s m h d w``), e.g. ``"90s"``, ``"5m"``, ``"1h30m"``, ``"0.5s"``.
    Raises :class:`ConfigError` naming the value otherwise, or when it is negative (or zero
    unless ``allow_zero``).
    """
    if isinstance(value, timedelta):
        delta = value
    elif isinstance(value, bool):
        raise ConfigError(f"invalid {what} {value!r}: expected e.g. '90s', '5m' or a timedelta")
    elif isinstance(value, (int, float)):
        delta = timedelta(seconds=float(value))
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
        delta = timedelta(seconds=seconds)
    else:
        raise ConfigError(
            f"invalid {what} {value!r}: expected a string such as '90s', a number of "
            "seconds or a timedelta"
        )
    if delta < timedelta(0) or (delta == timedelta(0) and not allow_zero):
        raise ConfigError(f"invalid {what} {value!r}: must be positive")
    return delta
