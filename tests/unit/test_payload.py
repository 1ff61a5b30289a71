"""Payload validation: what a handler receives is what a JSON round trip gives."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from soloist.errors import PayloadError
from soloist.payload import validate_payload

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
values = st.recursive(
    scalars, lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=8
)


@given(st.dictionaries(st.text(), values))
def test_validated_payload_equals_its_json_round_trip(payload: dict[str, object]) -> None:
    """Fast path or not, the result is the JSON round trip, with the same types."""
    result = validate_payload(payload)
    expected = json.loads(json.dumps(payload))
    assert result == expected
    assert [type(v) for v in result.values()] == [type(v) for v in expected.values()]
    assert result is not payload  # the caller's dict is never shared


@pytest.mark.parametrize("bad", [math.nan, math.inf, {1, 2}, object(), b"bytes"])
def test_non_json_values_are_refused_with_the_value_named(bad: object) -> None:
    """NaN, infinities, sets, objects and bytes are not JSON: PayloadError names them."""
    with pytest.raises(PayloadError, match="not JSON-serialisable"):
        validate_payload({"x": bad})


def test_tuples_become_lists() -> None:
    """A tuple arrives as a list, as every other instance would read it from the store."""
    assert validate_payload({"t": (1, 2)}) == {"t": [1, 2]}
