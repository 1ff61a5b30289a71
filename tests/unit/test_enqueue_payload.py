"""``enqueue(task, payload={...})``: the payload is one dict, so no key of it can collide
with enqueue's own ``key``, ``delay`` and ``at``."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from soloist import Scheduler
from soloist.errors import PayloadError

COLLIDING = {"key": 7, "delay": "soon", "at": "noon", "payload": [1]}


def keyed(ctx: Any, key: int, delay: str = "", at: str = "", payload: Any = None) -> None:
    """Parameters named like enqueue's options, and payload."""


def app_with_task() -> Scheduler:
    app = Scheduler("memory://")
    app.task(keyed)
    return app


def test_payload_keys_named_like_the_options_are_payload() -> None:
    """Keys named key, delay, at and payload are stored as the payload; the options of
    the same names stay enqueue's (the idempotency key dedupes, the delay applies)."""
    app = app_with_task()
    try:
        first = app.enqueue(keyed, COLLIDING, key="once", delay="1h")
        assert app.enqueue("keyed", payload={"key": 8}, key="once") == first
        [occ] = app.history()
        assert occ.id == first
        assert occ.payload == COLLIDING
        assert (occ.due_at - occ.created_at).total_seconds() == pytest.approx(3600, abs=1)
    finally:
        app.close()


def test_aenqueue_takes_the_payload_the_same_way() -> None:
    """The async twin has the same parameters."""
    app = app_with_task()

    async def go() -> None:
        try:
            occ_id = await app.aenqueue(keyed, payload=COLLIDING, key="k")
            [occ] = await app.ahistory()
            assert (occ.id, occ.payload) == (occ_id, COLLIDING)
        finally:
            await app.aclose()

    asyncio.run(go())


@pytest.mark.parametrize(
    ("payload", "named"),
    [
        (["key", 7], "['key', 7]"),
        ('{"key": 7}', """'{"key": 7}'"""),
        ({"key": {1, 2}}, "{1, 2}"),
        ({"key": float("nan")}, "nan"),
        ({1: 7}, "1"),
    ],
    ids=["a-list", "a-json-string", "a-set-value", "nan", "a-number-key"],
)
def test_a_payload_that_is_not_a_dict_of_json_values_is_refused(
    payload: object, named: str
) -> None:
    """PayloadError naming the payload (or its bad part); nothing is stored."""
    app = app_with_task()
    try:
        with pytest.raises(PayloadError) as caught:
            app.enqueue(keyed, payload)  # type: ignore[arg-type]
        assert named in str(caught.value)
        assert app.history() == []
    finally:
        app.close()


def test_the_payload_is_no_longer_given_as_keyword_arguments() -> None:
    """The 0.1 form ``enqueue(task, key=7, to=...)`` is a TypeError naming the argument,
    never a payload that silently lost its ``key``."""
    app = app_with_task()
    try:
        with pytest.raises(TypeError, match="to"):
            app.enqueue(keyed, to="a@b.c")  # type: ignore[call-arg]
        assert app.history() == []
    finally:
        app.close()
