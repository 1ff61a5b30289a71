"""Checks every store applies to values crossing its boundary."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from soloist.clock import UTC
from soloist.errors import ConfigError, PayloadError


def aware_utc(moment: datetime, what: str) -> datetime:
    """``moment`` in UTC; a naive datetime is a caller bug, named here."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ConfigError(f"invalid {what} {moment!r}: expected a timezone-aware datetime")
    return moment.astimezone(UTC)


def result_json(value: Any) -> str | None:
    """A handler's result as JSON text (None stays None), or PayloadError."""
    if value is None:
        return None
    try:
        return json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"invalid result {value!r}: not JSON-serialisable ({exc})") from None
