"""Encoding helpers the drivers share: JSON text of payloads and results (one error
message for a value that does not encode, whatever the store), and new ids."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from soloist.errors import PayloadError
from soloist.models import NewOccurrence
from soloist.payload import validate_payload

# One encoder, made once: json.dumps with options would build a new one on every call.
_encode = json.JSONEncoder(allow_nan=False).encode


def new_ids(count: int) -> list[str]:
    """``count`` new occurrence ids: 128 random bits as 32 hex digits, like ``uuid4().hex``
    (the same form and uniqueness), from one ``urandom`` call instead of one per id."""
    text = os.urandom(16 * count).hex()
    return [text[start : start + 32] for start in range(0, 32 * count, 32)]


def object_json(value: object, what: str) -> str:
    """A JSON object (a dict with string keys) as JSON text, or PayloadError naming
    ``what``; None is the empty object.

    Encodes once: the text equals that of :func:`soloist.payload.validate_payload`'s round
    trip, which only runs to build the error of a value that does not encode."""
    text = _object_text(value)
    return text if text is not None else _encode(validate_payload(value, what=what))


def payload_json(item: NewOccurrence) -> str:
    """The payload of ``item`` as JSON text, as :func:`object_json`; the message naming
    its dedupe key is only built when there is an error."""
    text = _object_text(item.payload)
    if text is not None:
        return text
    return _encode(validate_payload(item.payload, what=f"payload of {item.dedupe_key!r}"))


def payloads_json(items: Sequence[NewOccurrence]) -> str:
    """The payloads of ``items`` as the text of one JSON array, in order: each checked as
    :func:`payload_json` does, all encoded by one call (bulk inserts: encoding each one
    apart costs several times more than the encoding itself)."""
    payloads = [item.payload for item in items]
    if all(type(p) is dict and _STR.issuperset(map(type, p)) for p in payloads):
        try:
            return _encode(payloads)
        except (TypeError, ValueError):
            pass  # one of them does not encode: the slow path names it
    return _encode([json.loads(payload_json(item)) for item in items])


_STR = frozenset([str])


def _object_text(value: object) -> str | None:
    """The JSON text of a valid JSON object, else None (the caller reports why)."""
    if not isinstance(value, dict) or not all(isinstance(key, str) for key in value):
        return None
    try:
        return _encode(value)
    except (TypeError, ValueError):
        return None


def result_json(value: Any) -> str | None:
    """A handler's result as JSON text (None stays None), or PayloadError."""
    if value is None:
        return None
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"invalid result {value!r}: not JSON-serialisable ({exc})") from None
