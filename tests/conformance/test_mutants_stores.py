"""Store behaviour where ``make mutate`` (the stores groups) found no test, on memory,
SQLite, PostgreSQL and Redis alike: what completing leaves in a row (a finished row keeps
its due time; a retried one is due again and not finished), what a skipped row says, a
batch whose first claim is stale, the attempt a release records, and which running sibling
decides that a skip row is skipped (the earliest, also when the batch claimed one first)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from soloist.clock import Clock
from soloist.models import Claimed, ErrorCode, Outcome, Overlap, State
from soloist.stores.base import Store
from soloist.stores.memory import MemoryStore
from soloist.stores.postgres import PostgresStore
from soloist.stores.redis import RedisStore
from soloist.stores.sqlite import SQLiteStore
from soloist.testing.conformance import StoreFactory
from soloist.testing.conformance.base import T0, ConformanceBase, at, claim, insert, new_occurrence

SKIPPED = "skipped: a previous occurrence of this job and scope was running"


class TestCompletionAndSkips(ConformanceBase):
    @pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
    def make_store(self, request: pytest.FixtureRequest, tmp_path: Path) -> StoreFactory:
        kind: str = request.param
        if kind == "memory":
            shared = MemoryStore("memory://")
            return lambda clock: shared
        makers: dict[str, Callable[[Clock], Store]] = {
            "sqlite": lambda clock: SQLiteStore(f"sqlite:///{tmp_path / 's.db'}", clock=clock),
        }
        if kind == "postgres":
            url = request.getfixturevalue("postgres_url")
            makers["postgres"] = lambda clock: PostgresStore(url, clock=clock)
        if kind == "redis":
            url = request.getfixturevalue("redis_url")
            makers["redis"] = lambda clock: RedisStore(url, clock=clock)
        return makers[kind]

    async def test_a_finished_row_keeps_its_due_time_and_a_retried_one_is_not_finished(
        self, store: Store
    ) -> None:
        """Completing as succeeded keeps the row's due time and sets its finish time; a
        failure with a retry makes it due at the retry time, with no finish time."""
        await insert(store, new_occurrence("ok", due_at=T0), new_occurrence("again", due_at=T0))
        claimed = {o.dedupe_key: o for o in await claim(store, now=at(1))}
        first, second = claimed["ok"], claimed["again"]
        outcomes = [
            Outcome(first.id, first.fencing_token, State.SUCCEEDED),
            Outcome(second.id, second.fencing_token, State.FAILED, "handler_error", "boom",
                    retry_at=at(60)),
        ]  # fmt: skip
        assert await store.occurrence_complete("i1", outcomes, now=at(2)) == {first.id, second.id}
        done = await store.occurrence_get(first.id)
        assert done is not None and done.state == State.SUCCEEDED
        assert (done.due_at, done.finished_at) == (T0, at(2))
        retried = await store.occurrence_get(second.id)
        assert retried is not None and retried.state == State.FAILED
        assert (retried.due_at, retried.finished_at) == (at(60), None)

    async def test_a_skipped_row_says_a_previous_occurrence_was_running(self, store: Store) -> None:
        """An occurrence skipped under overlap=skip is recorded with the overlap error code
        and the message that says why."""
        await insert(store, new_occurrence("first", overlap=Overlap.SKIP))
        (running,) = await claim(store, now=T0)
        (second,) = await insert(
            store, new_occurrence("second", due_at=at(1), overlap=Overlap.SKIP)
        )
        assert await claim(store, now=at(2)) == []
        skipped = await store.occurrence_get(second.id)
        assert skipped is not None and skipped.state == State.SKIPPED
        assert (skipped.error_code, skipped.error_message) == (ErrorCode.OVERLAP.value, SKIPPED)
        assert skipped.finished_at == at(2)
        assert running.state == State.RUNNING

    async def test_a_stale_claim_first_in_a_batch_does_not_stop_the_rest(
        self, store: Store
    ) -> None:
        """A completion or a release whose first claim is no longer held (a wrong fencing
        token) still applies to the held claims after it."""
        await insert(store, *(new_occurrence(k) for k in ("a", "b", "c", "d")))
        claimed = {o.dedupe_key: o for o in await claim(store, now=at(1))}
        a, b, c, d = (claimed[k] for k in "abcd")
        done = [
            Outcome(a.id, a.fencing_token + 1, State.SUCCEEDED),
            Outcome(b.id, b.fencing_token, State.SUCCEEDED),
        ]
        assert await store.occurrence_complete("i1", done, now=at(2)) == {b.id}
        back = [Claimed(c.id, c.fencing_token + 1), Claimed(d.id, d.fencing_token)]
        assert await store.lease_release("i1", back, now=at(2)) == {d.id}
        rows = [await store.occurrence_get(o.id) for o in (a, b, c, d)]
        states = [row.state if row is not None else None for row in rows]
        assert states == [State.RUNNING, State.SUCCEEDED, State.RUNNING, State.SCHEDULED]

    async def test_a_release_records_its_attempt(self, store: Store) -> None:
        """A release writes the attempt to the history, at the release time, as released
        (or dead, when its cancellation was requested), with the message saying so."""
        await insert(store, new_occurrence("a"), new_occurrence("b"))
        claimed = {o.dedupe_key: o for o in await claim(store, now=at(1))}
        a, b = claimed["a"], claimed["b"]
        assert await store.occurrence_cancel(b.id, now=at(2)) is not None
        back = [Claimed(a.id, a.fencing_token), Claimed(b.id, b.fencing_token)]
        assert await store.lease_release("i1", back, now=at(3)) == {a.id, b.id}
        (released,) = await store.occurrence_attempts(a.id)
        assert (released.outcome, released.finished_at) == ("released", at(3))
        assert released.error_message == "lease released before the attempt finished"
        (dead,) = await store.occurrence_attempts(b.id)
        assert (dead.outcome, dead.finished_at) == ("dead", at(3))
        assert dead.error_message == (
            "cancelled on request; its runner stopped before the attempt finished"
        )

    async def test_the_earliest_running_sibling_decides_a_skip(self, store: Store) -> None:
        """Two siblings of a group run (overlap=allow), started at 1 and at 3: a skip row due
        at 2 is skipped, since one of them was already running when it fell due."""
        first, second = await insert(
            store, new_occurrence("a", due_at=T0), new_occurrence("b", due_at=at(0.5))
        )
        assert [o.id for o in await claim(store, limit=1, now=at(1))] == [first.id]
        assert [o.id for o in await claim(store, limit=1, now=at(3))] == [second.id]
        (late,) = await insert(store, new_occurrence("c", due_at=at(2), overlap=Overlap.SKIP))
        assert await claim(store, now=at(4)) == []
        skipped = await store.occurrence_get(late.id)
        assert skipped is not None and skipped.state == State.SKIPPED
        assert (skipped.error_code, skipped.finished_at) == (ErrorCode.OVERLAP.value, at(4))

    async def test_a_batch_claim_does_not_hide_an_earlier_running_sibling(
        self, store: Store
    ) -> None:
        """A sibling runs since 1; a claim at 3 takes an allow row of the group first, then
        meets a skip row due at 2: the sibling running since 1 skips it (the claim of this
        batch, started at 3, does not make it wait)."""
        await insert(store, new_occurrence("run", due_at=T0))
        (running,) = await claim(store, now=at(1))
        allow, skip = await insert(
            store,
            new_occurrence("allow", due_at=at(1.5)),
            new_occurrence("skip", due_at=at(2), overlap=Overlap.SKIP),
        )
        assert [o.id for o in await claim(store, now=at(3))] == [allow.id]
        skipped = await store.occurrence_get(skip.id)
        assert skipped is not None and skipped.state == State.SKIPPED
        assert (skipped.error_code, skipped.finished_at) == (ErrorCode.OVERLAP.value, at(3))
        still = await store.occurrence_get(running.id)
        assert still is not None and still.state == State.RUNNING
