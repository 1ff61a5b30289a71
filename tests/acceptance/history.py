"""Checks on a store's execution history that several acceptance tests share."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from soloist.models import Occurrence, State


def now() -> datetime:
    return datetime.now(timezone.utc)


def assert_each_second_once(history: list[Occurrence], until: datetime) -> None:
    """Every whole second from the first plan time to ``until`` succeeded exactly once."""
    window = [o for o in history if o.plan_time <= until]
    first = min(o.plan_time for o in window)
    plans = sorted(o.plan_time for o in window)
    expected = [
        first + timedelta(seconds=k) for k in range(int((until - first).total_seconds()) + 1)
    ]
    assert plans == expected, (
        f"missing {sorted(set(expected) - set(plans))}, extra {sorted(set(plans) - set(expected))}"
    )
    not_ok = [(o.plan_time, o.state.value) for o in window if o.state is not State.SUCCEEDED]
    assert not_ok == []


def settled(history: list[Occurrence], minimum: int) -> bool:
    """At least ``minimum`` occurrences, and every one planned over 2 s ago succeeded."""
    past = [o for o in history if o.plan_time <= now() - timedelta(seconds=2)]
    return len(past) >= minimum and all(o.state is State.SUCCEEDED for o in past)
