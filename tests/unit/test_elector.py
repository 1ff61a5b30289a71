"""Leader election driven tick by tick on a fake clock and the memory store."""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta, timezone

import pytest

from soloist import Scheduler, every
from soloist.runtime.elector import Elector
from soloist.runtime.service import ServiceBundle
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=timezone.utc)
TTL = timedelta(seconds=8)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(T0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryStore:
    return MemoryStore("memory://", clock=clock)


def elector(clock: FakeClock, store: MemoryStore, iid: str, events: list[str]) -> Elector:
    return Elector(
        ServiceBundle(clock, iid),
        store,
        election="test",
        ttl=TTL,
        on_elected=[lambda epoch: events.append(f"{iid} elected {epoch}")],
        on_demoted=[lambda epoch: events.append(f"{iid} demoted {epoch}")],
    )


async def test_one_leader_and_failover_after_expiry(clock: FakeClock, store: MemoryStore) -> None:
    """One of two electors leads; when it stops renewing, the other leads at epoch 2 once
    the lease expires, and the first demotes itself before that (trust window)."""
    events: list[str] = []
    a, b = elector(clock, store, "a", events), elector(clock, store, "b", events)
    assert await a.tick() == pytest.approx(2.0)  # leader renews every ttl / 4
    await b.tick()
    assert (a.is_leader, b.is_leader, b.leader_id, b.epoch) == (True, False, "a", 1)

    clock.advance(6.5)  # a is frozen: no renewal; its trust (3/4 ttl = 6 s) has passed
    assert not a.is_leader
    await b.tick()
    assert not b.is_leader  # the store lease (8 s) still holds
    clock.advance(2)
    await b.tick()
    assert (b.is_leader, b.epoch) == (True, 2)
    await a.tick()  # a wakes up: its renewal is refused, it demotes
    assert events == ["a elected 1", "b elected 2", "a demoted 1"]


async def test_renewal_keeps_the_epoch(clock: FakeClock, store: MemoryStore) -> None:
    """A leader that renews in time stays leader with the same epoch."""
    events: list[str] = []
    a = elector(clock, store, "a", events)
    await a.tick()
    for _ in range(10):
        clock.advance(2)
        await a.tick()
    assert (a.is_leader, a.epoch, events) == (True, 1, ["a elected 1"])


async def test_resignation_hands_over_at_once(clock: FakeClock, store: MemoryStore) -> None:
    """A resigning leader frees the lease: the next try of a follower wins, epoch + 1."""
    events: list[str] = []
    a, b = elector(clock, store, "a", events), elector(clock, store, "b", events)
    await a.tick()
    await b.tick()
    await a.resign()
    await b.tick()
    assert (a.is_leader, b.is_leader, b.epoch) == (False, True, 2)
    assert events == ["a elected 1", "a demoted 1", "b elected 2"]


async def test_leader_mode_plans_only_on_the_leader(clock: FakeClock, store: MemoryStore) -> None:
    """In leader mode a follower neither plans nor claims job occurrences."""
    apps = []
    for iid in ("a", "b"):
        app = Scheduler(store, instance_id=iid, clock=clock, mode="leader", lease_ttl="8s")
        app.job(every("1s"), name="tick")(lambda ctx: None)
        app.task(name="mail")(lambda ctx: None)
        apps.append(app)
    runtimes = []
    for app in apps:
        await app.start()
        runtimes.append(app.runtime)
    try:
        for _ in range(200):  # the electors' first ticks run as the loop turns
            if any(app.is_leader for app in apps) and all(app.leader_id for app in apps):
                break
            await asyncio.sleep(0.01)
        leader = next(app for app in apps if app.is_leader)
        follower = next(app for app in apps if not app.is_leader)
        assert follower.leader_id == leader.instance_id
        assert follower.leader_epoch == leader.leader_epoch == 1
        assert follower.runtime is not None and not follower.runtime.plans()
        assert follower.runtime.claimable_tasks() == ["mail"]
        assert leader.runtime is not None and set(leader.runtime.claimable_tasks()) == {
            "tick",
            "mail",
        }
    finally:
        for app in apps:
            await app.stop()
