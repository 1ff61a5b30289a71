"""The store core over any store: capabilities, their fallbacks, and the wrapper applied to
a store given to the Scheduler (the checks themselves are in the conformance suite)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from soloist import Scheduler
from soloist.errors import ConfigError
from soloist.models import Kind, NewOccurrence
from soloist.stores.core import PLAIN, Capabilities, CheckedStore, capabilities_of, checked
from soloist.stores.core.checked import MAX_DELAY
from soloist.stores.memory import MemoryStore
from soloist.testing import FakeClock

T0 = datetime(2026, 5, 1, 9, 0, tzinfo=timezone.utc)


def _item(key: str) -> NewOccurrence:
    return NewOccurrence(key, "t", "t", "", T0, T0, Kind.TASK)


class PlainStore(MemoryStore):
    """A store written outside soloist that declares no extras."""

    capabilities = PLAIN


class ClaimsTooMuch(MemoryStore):
    """Declares an extra without the method that goes with it."""

    capabilities = Capabilities(inserts_at_now=True)


class FastInserts(MemoryStore):
    """Declares inserts_at_now and counts the calls of its own method."""

    capabilities = Capabilities(inserts_at_now=True, reach="process")

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock=clock)
        self.calls = 0

    async def occurrence_insert_now(
        self, item: NewOccurrence, delay: timedelta
    ) -> tuple[object, bool]:
        self.calls += 1
        due = self._clock.now() + delay
        from dataclasses import replace

        return await self.occurrence_insert(replace(item, plan_time=due, due_at=due))


async def test_insert_at_now_falls_back_to_reading_the_clock() -> None:
    """A store without inserts_at_now still inserts at its now plus the delay."""
    clock = FakeClock(T0)
    store = checked(PlainStore(clock=clock))
    occ, created = await store.occurrence_insert_now(_item("a"), timedelta(seconds=5))
    assert created and occ.due_at == occ.plan_time == T0 + timedelta(seconds=5)


async def test_a_declared_extra_is_used() -> None:
    """A store that declares inserts_at_now gets the call itself."""
    driver = FastInserts(FakeClock(T0))
    occ, _ = await checked(driver).occurrence_insert_now(_item("a"))
    assert driver.calls == 1 and occ.due_at == T0


async def test_a_negative_delay_is_refused_before_the_store() -> None:
    driver = FastInserts(FakeClock(T0))
    with pytest.raises(ConfigError, match="delay"):
        await checked(driver).occurrence_insert_now(_item("a"), timedelta(seconds=-1))
    assert driver.calls == 0


async def test_a_delay_over_1000_years_is_refused_before_the_store() -> None:
    """The store adds the delay to its own clock: past year 9999 it would write a row no
    reader decodes, so the core refuses it, naming the delay, on every store."""
    fast = FastInserts(FakeClock(T0))
    for store in (checked(fast), checked(PlainStore(clock=FakeClock(T0)))):
        with pytest.raises(ConfigError, match=r"delay .*days=3650000.*1000 years"):
            await store.occurrence_insert_now(_item("a"), timedelta(days=3_650_000))
        assert await store.occurrence_list() == []
    assert fast.calls == 0
    occ, _ = await checked(fast).occurrence_insert_now(_item("a"), MAX_DELAY)
    assert fast.calls == 1 and occ.due_at == T0 + MAX_DELAY


async def test_extras_a_store_lacks_do_nothing() -> None:
    """listen() and schema_check() on a store that cannot are no-ops, not errors."""
    store = checked(PlainStore())
    await store.listen()
    await store.schema_check()


async def test_a_store_without_pages_of_jobs_gets_the_same_pages_slowly() -> None:
    """A store that does not declare pages_jobs gets the same pages, last outcomes and
    counts from the core, which reads every job and each paged job's history."""
    from soloist.models import JobRecord, Outcome, State
    from soloist.stores.pages import JobQuery

    clock = FakeClock(T0)
    plain, paging = checked(PlainStore(clock=clock)), checked(MemoryStore(clock=clock))
    assert not plain.capabilities.pages_jobs and paging.capabilities.pages_jobs
    runs: dict[object, str] = {}
    for store in (plain, paging):
        every = {"kind": "every", "seconds": 60}
        jobs = [JobRecord(f"j{n}", "t", every, paused=n == 3) for n in range(7)]
        await store.job_upsert(jobs)
        for n in range(12):  # j2's newest finished row lies behind 12 planned after it
            item = NewOccurrence(f"j2:{n}", "j2", "t", "", T0, T0, Kind.SCHEDULE)
            await store.occurrence_insert(replace(item, plan_time=T0 + timedelta(seconds=n)))
        (run,) = await store.occurrence_claim("i", ["t"], 1, timedelta(seconds=30), now=T0)
        await store.occurrence_complete("i", [Outcome(run.id, run.fencing_token, State.DEAD)])
        runs[store] = run.id
    queries = [
        JobQuery(limit=3),
        JobQuery(after="j2", limit=3),
        JobQuery(prefix="j", paused=True),
        JobQuery(outcome="dead"),
        JobQuery(outcome="none", limit=2),
    ]
    for query in queries:
        slow, fast = await plain.job_page(query), await paging.job_page(query)
        assert slow.next_after == fast.next_after
        assert [(v.record, v.last and v.last.state) for v in slow.jobs] == [
            (v.record, v.last and v.last.state) for v in fast.jobs
        ]
    for store in (plain, paging):
        last = (await store.job_page(JobQuery(outcome="dead"))).jobs[0].last
        assert last is not None and last.id == runs[store]
    assert await plain.job_counts("j") == await paging.job_counts("j")


def test_an_extra_declared_without_its_method_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"inserts_at_now.*occurrence_insert_now"):
        checked(ClaimsTooMuch())


def test_capabilities_must_be_declared_with_the_class() -> None:
    store = MemoryStore()
    store.capabilities = {"notifies": True}  # type: ignore[assignment]
    with pytest.raises(ConfigError, match="Capabilities"):
        capabilities_of(store)


def test_checked_is_idempotent_and_refuses_what_is_not_a_store() -> None:
    store = checked(MemoryStore())
    assert checked(store) is store
    with pytest.raises(ConfigError, match="'memory://'"):
        checked("memory://")  # type: ignore[arg-type]


async def test_a_store_given_to_the_scheduler_gets_the_checks() -> None:
    """Scheduler(store=...) wraps the store: a lease born expired is refused there too."""
    driver = PlainStore()
    app = Scheduler(driver)
    store = await app.astore()
    assert isinstance(store, CheckedStore) and store.driver is driver
    with pytest.raises(ConfigError, match="lease_ttl"):
        await store.occurrence_claim("i1", ["t"], 10, timedelta(0))
    await app.aclose()


def test_an_unknown_scheme_lists_every_scheme() -> None:
    """The message names the URL (password masked) and every scheme there is."""
    from soloist.stores import DRIVERS, open_store

    with pytest.raises(ConfigError) as caught:
        open_store("mysql://app:secret@db/jobs")
    message = str(caught.value)
    assert "'mysql'" in message and "secret" not in message
    assert all(f"'{scheme}'" in message for scheme in DRIVERS)


class Legacy:
    """A store written before capabilities: it has the methods, and declares nothing."""

    url = "legacy://"

    async def schema_check(self) -> None:
        raise AssertionError("called")

    async def occurrence_insert_now(self, item: NewOccurrence, delay: timedelta) -> None:
        raise AssertionError("called")


def test_a_store_that_declares_nothing_offers_the_extras_it_has() -> None:
    """Without a capabilities attribute, the methods a store has are its extras (a store
    with schema_check() keeps being checked by the read-only commands)."""
    found = capabilities_of(Legacy())
    assert found.checks_schema and found.inserts_at_now and not found.notifies
    assert capabilities_of(object()) == Capabilities()
