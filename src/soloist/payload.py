"""Payloads are JSON objects, checked when they are enqueued, never pickled."""

from __future__ import annotations

import json
import math
from typing import Any

from soloist.errors import PayloadError
from soloist.models import JSONDict


def validate_payload(payload: object, *, what: str = "payload") -> JSONDict:
    """Return ``payload`` as a JSON-round-tripped dict, or raise PayloadError naming it.

    Round-tripping means the handler receives exactly what every other instance would read
    from the store (tuples become lists, for instance), whichever instance runs it.
    """
    if payload is None:
        return {}
    if not isinstance(payload, dict):
        raise PayloadError(f"invalid {what} {payload!r}: expected a JSON object (a dict)")
    for key in payload:
        if not isinstance(key, str):
            raise PayloadError(f"invalid {what}: key {key!r} is not a string")
    if all(_is_plain(value) for value in payload.values()):
        return dict(payload)  # what the round trip would give, without its cost
    try:
        text = json.dumps(payload, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise PayloadError(
            f"invalid {what} {_short(payload)}: not JSON-serialisable ({exc}); "
            "expected str, int, float, bool, None, lists and dicts of them"
        ) from None
    decoded: JSONDict = json.loads(text)
    return decoded


def _is_plain(value: object) -> bool:
    """A JSON scalar that survives a JSON round trip unchanged (exact types only)."""
    kind = type(value)
    return kind in _SCALARS or (kind is float and math.isfinite(value))  # type: ignore[arg-type]


_SCALARS = frozenset({str, int, bool, type(None)})


def summarise_result(value: Any, limit: int = 2000) -> Any:
    """A handler's return value as stored in the audit record: JSON if it is JSON (and
    small), else its truncated ``repr``."""
    if value is None:
        return None
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return _short(value, limit)
    if len(text) > limit:
        return text[:limit] + "..."
    return value


def _short(value: object, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
