"""Conformance: life cycle, inserting and reading occurrences, planning cursors."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from soloist.errors import ConfigError, PayloadError, StoreError
from soloist.models import (
    DEFAULT_MAX_CRASHES,
    Kind,
    Outcome,
    Overlap,
    PlanAdvance,
    PlanCursor,
    State,
)
from soloist.stores.base import Store
from soloist.stores.core import checked
from soloist.stores.core.checked import MAX_DELAY
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import (
    T0,
    StoreFactory,
    at,
    claim,
    insert,
    new_occurrence,
)


class OccurrenceConformance:
    # -- life cycle -------------------------------------------------------------------------
    async def test_store_satisfies_the_protocol(self, store: Store) -> None:
        """The store is a soloist.stores.base.Store with its URL."""
        assert isinstance(store, Store)
        assert isinstance(store.url, str) and store.url

    async def test_migrate_twice_is_harmless(self, store: Store) -> None:
        """migrate() is idempotent: a second call keeps the data."""
        await insert(store, new_occurrence("k"))
        await store.migrate()
        assert len(await store.occurrence_list()) == 1

    async def test_migrate_returns_the_versions_it_applied(
        self, make_store: StoreFactory, clock: FakeClock
    ) -> None:
        """migrate() on a new store returns the versions it applied, in order (a store
        with a schema applies some); then, on any handle, none: it is up to date."""
        store = checked(make_store(clock))
        try:
            first = await store.migrate()
            assert first == sorted(set(first))
            assert bool(first) is store.capabilities.checks_schema
            assert await store.migrate() == []
            other = checked(make_store(clock))
            try:
                assert await other.migrate() == []
            finally:
                await other.close()
        finally:
            await store.close()

    async def test_a_closed_store_refuses_calls(self, store: Store) -> None:
        """close() may be called twice; then the store refuses reads and writes with a
        StoreError saying it is closed (it neither reconnects nor answers)."""
        (occ,) = await insert(store, new_occurrence("k"))
        await store.close()
        await store.close()
        with pytest.raises(StoreError, match="closed"):
            await store.occurrence_get(occ.id)
        with pytest.raises(StoreError, match="closed"):
            await store.occurrence_insert(new_occurrence("k2"))
        with pytest.raises(StoreError, match="closed"):
            await claim(store, now=T0)

    async def test_now_reads_the_store_clock(self, store: Store, clock: FakeClock) -> None:
        """now() is the store's clock, an aware UTC datetime."""
        assert await store.now() == T0
        clock.advance(90)
        assert await store.now() == at(90)

    # -- insert and read --------------------------------------------------------------------
    async def test_insert_creates_a_scheduled_row(self, store: Store, clock: FakeClock) -> None:
        """A new occurrence starts scheduled, attempt 0, token 0, created_at = now."""
        clock.advance(5)
        occ, created = await store.occurrence_insert(new_occurrence("k", due_at=at(60)))
        assert created
        assert (occ.state, occ.attempt, occ.fencing_token) == (State.SCHEDULED, 0, 0)
        assert (occ.crashes, occ.max_crashes) == (0, DEFAULT_MAX_CRASHES)
        assert occ.created_at == at(5)
        assert occ.instance_id is None and occ.lease_expires_at is None
        assert occ.started_at is None and occ.finished_at is None
        assert (occ.error_code, occ.error_message, occ.result) == (None, None, None)

    async def test_insert_round_trips_every_field(self, store: Store) -> None:
        """Every attribute reads back as written; datetimes exact to the microsecond, UTC."""
        plus_two = timezone(timedelta(hours=2))
        plan = datetime(2026, 3, 29, 3, 30, 0, 123456, tzinfo=plus_two)
        due = datetime(2026, 3, 29, 1, 30, 1, 999999, tzinfo=timezone.utc)
        item = new_occurrence(
            "report:tenant-7:2026-03-29",
            job="report",
            task="send_report",
            scope="tenant-7",
            plan_time=plan,
            due_at=due,
            kind=Kind.TASK,
            max_attempts=4,
            overlap=Overlap.QUEUE,
            payload={"to": "a@b.c"},
            max_crashes=7,
        )
        occ, _ = await store.occurrence_insert(item)
        stored = await store.occurrence_get(occ.id)
        assert stored == occ
        assert isinstance(occ.id, str) and occ.id
        assert (occ.dedupe_key, occ.job, occ.task, occ.scope) == (
            "report:tenant-7:2026-03-29",
            "report",
            "send_report",
            "tenant-7",
        )
        assert (occ.kind, occ.max_attempts, occ.overlap) == (Kind.TASK, 4, Overlap.QUEUE)
        assert (occ.crashes, occ.max_crashes) == (0, 7)
        assert occ.plan_time == plan and occ.due_at == due
        assert occ.plan_time.utcoffset() == timedelta(0) and occ.due_at.utcoffset() == timedelta(0)
        assert occ.plan_time.microsecond == 123456 and occ.due_at.microsecond == 999999

    async def test_payload_round_trips_as_json(self, store: Store) -> None:
        """Payloads come back as the JSON they encode (nested values, unicode, tuples->lists)."""
        payload: dict[str, Any] = {"n": 1, "x": 0.5, "ok": True, "none": None, "s": "héllo ✓"}
        payload |= {"t": (1, 2), "nested": {"list": [1, {"a": []}]}}
        occ, _ = await store.occurrence_insert(new_occurrence("k", payload=payload))
        expected = {**payload, "t": [1, 2]}
        assert occ.payload == expected
        stored = await store.occurrence_get(occ.id)
        assert stored is not None and stored.payload == expected

    async def test_returned_payload_is_a_copy(self, store: Store) -> None:
        """Mutating a returned payload does not change the stored one."""
        occ, _ = await store.occurrence_insert(new_occurrence("k", payload={"a": [1]}))
        occ.payload["a"].append(2)
        stored = await store.occurrence_get(occ.id)
        assert stored is not None and stored.payload == {"a": [1]}

    async def test_insert_rejects_a_non_json_payload(self, store: Store) -> None:
        """A payload that is not JSON raises PayloadError and stores nothing."""
        with pytest.raises(PayloadError):
            await store.occurrence_insert(new_occurrence("k", payload={"when": object()}))
        assert await store.occurrence_list() == []

    async def test_insert_rejects_a_naive_datetime(self, store: Store) -> None:
        """A naive plan time is a caller bug: ValueError, nothing stored."""
        with pytest.raises(ValueError, match="aware"):
            await store.occurrence_insert(new_occurrence("k", due_at=datetime(2026, 1, 1)))
        assert await store.occurrence_list() == []

    async def test_insert_duplicate_key_returns_the_existing_row(self, store: Store) -> None:
        """Inserting an existing dedupe_key changes nothing and returns the stored row."""
        first, created1 = await store.occurrence_insert(new_occurrence("k", payload={"v": 1}))
        again = new_occurrence("k", job="other", due_at=at(99), payload={"v": 2})
        second, created2 = await store.occurrence_insert(again)
        assert (created1, created2) == (True, False)
        assert second == first
        assert await store.occurrence_list() == [first]

    async def test_concurrent_duplicate_inserts_create_one_row(
        self, store: Store, store2: Store
    ) -> None:
        """Racing inserts of one key from two handles create exactly one row."""
        items = [new_occurrence("k", payload={"n": n}) for n in range(10)]
        handles = (store, store2)
        results = await asyncio.gather(
            *(handles[n % 2].occurrence_insert(item) for n, item in enumerate(items))
        )
        assert sum(created for _, created in results) == 1
        assert len({occ.id for occ, _ in results}) == 1

    # -- insert at the store's now (enqueue) ------------------------------------------------
    async def test_insert_now_is_due_at_the_store_clock_plus_the_delay(
        self, store: Store, clock: FakeClock
    ) -> None:
        """occurrence_insert_now ignores the item's times: planned and due at the store's
        now plus the delay, created at now, every other field as given, read back equal;
        claimable from its due time on, not before."""
        clock.advance(5)
        item = new_occurrence(
            "t:send:1",
            job="send",
            task="send",
            due_at=at(9999),
            kind=Kind.TASK,
            max_attempts=3,
            payload={"to": "a@b.c", "n": [1, 2]},
            max_crashes=7,
        )
        occ, created = await checked(store).occurrence_insert_now(item, timedelta(seconds=10))
        assert created and occ.created_at == at(5)
        assert occ.plan_time == occ.due_at == at(15)
        assert (occ.dedupe_key, occ.job, occ.task, occ.scope, occ.kind) == (
            "t:send:1",
            "send",
            "send",
            "",
            Kind.TASK,
        )
        assert (occ.state, occ.attempt, occ.fencing_token) == (State.SCHEDULED, 0, 0)
        assert (occ.max_attempts, occ.overlap, occ.crashes, occ.max_crashes) == (
            3,
            Overlap.ALLOW,
            0,
            7,
        )
        assert occ.payload == {"to": "a@b.c", "n": [1, 2]}
        assert await store.occurrence_get(occ.id) == occ
        assert await claim(store, tasks=["send"], now=at(14)) == []
        (got,) = await claim(store, tasks=["send"], now=at(15))
        assert got.id == occ.id

    async def test_insert_now_with_a_known_key_returns_the_existing_row(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A dedupe key inserted before (by either insert) is left as it was and returned,
        whatever the new delay; a zero delay is due at once."""
        first, created = await checked(store).occurrence_insert_now(new_occurrence("k"))
        assert created and first.due_at == first.plan_time == first.created_at == T0
        clock.advance(60)
        again = new_occurrence("k", job="other", payload={"v": 2})
        second, created = await checked(store).occurrence_insert_now(again, timedelta(hours=1))
        assert not created and second == first
        (planned,) = await insert(store, new_occurrence("planned", due_at=at(7)))
        third, created = await checked(store).occurrence_insert_now(new_occurrence("planned"))
        assert not created and third == planned
        assert len(await store.occurrence_list()) == 2

    async def test_insert_now_is_exact_to_the_microsecond_far_ahead(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A delay of centuries (the due time past 2^53 microseconds since the epoch) still
        lands on the exact microsecond; over 1000 years is refused, nothing stored."""
        now = clock.advance(timedelta(microseconds=999_999))
        delay = timedelta(days=365 * 300, microseconds=8)  # due: an odd count, not a double
        occ, _ = await checked(store).occurrence_insert_now(new_occurrence("far"), delay)
        assert occ.plan_time == occ.due_at == now + delay
        assert await store.occurrence_get(occ.id) == occ
        with pytest.raises(ConfigError, match="delay"):
            await checked(store).occurrence_insert_now(new_occurrence("x"), MAX_DELAY + delay)
        assert [o.dedupe_key for o in await store.occurrence_list()] == ["far"]

    async def test_insert_now_takes_its_place_in_the_claim_order(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Rows of one due time are claimed by plan time, then insertion, whichever insert
        wrote them: an enqueued row (planned at its due time) comes after a row due then but
        planned a microsecond earlier, and before one planned a microsecond later."""
        due = clock.advance(timedelta(seconds=20, microseconds=123)) + timedelta(seconds=10)
        tick = timedelta(microseconds=1)
        early = new_occurrence("early", plan_time=due - tick, due_at=due)
        late = new_occurrence("late", plan_time=due + tick, due_at=due)
        await insert(store, late, early)
        occ, _ = await checked(store).occurrence_insert_now(
            new_occurrence("now"), timedelta(seconds=10)
        )
        assert occ.plan_time == occ.due_at == due
        claimed = await claim(store, limit=3, now=due)
        assert [o.dedupe_key for o in claimed] == ["early", "now", "late"]

    # -- insert many -------------------------------------------------------------------------
    async def test_insert_many_creates_all(self, store: Store) -> None:
        """insert_many stores every item, scheduled with its own id, and counts them."""
        items = [new_occurrence(f"k{n}", due_at=at(n)) for n in range(5)]
        assert await store.occurrence_insert_many(items) == 5
        stored = await store.occurrence_list()
        assert sorted(o.dedupe_key for o in stored) == [f"k{n}" for n in range(5)]
        assert {(o.state, o.attempt, o.fencing_token) for o in stored} == {(State.SCHEDULED, 0, 0)}
        assert len({o.id for o in stored}) == 5

    async def test_insert_many_ignores_existing_keys(self, store: Store) -> None:
        """Existing keys and a key repeated in the batch are neither counted nor changed."""
        (existing,) = await insert(store, new_occurrence("old", payload={"v": 1}))
        items = [
            new_occurrence("old", payload={"v": 2}),
            new_occurrence("new"),
            new_occurrence("twice", payload={"n": 1}),
            new_occurrence("twice", payload={"n": 2}),
        ]
        assert await store.occurrence_insert_many(items) == 2
        assert await store.occurrence_get(existing.id) == existing
        keys = sorted(o.dedupe_key for o in await store.occurrence_list())
        assert keys == ["new", "old", "twice"]
        assert await store.occurrence_insert_many(items) == 0

    async def test_insert_many_rows_equal_single_inserts(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A row written by insert_many reads back exactly as occurrence_insert stores one."""
        clock.advance(5)
        fields: dict[str, Any] = {
            "job": "report",
            "task": "send_report",
            "scope": "tenant-7",
            "plan_time": datetime(
                2026, 3, 29, 3, 30, 0, 123456, tzinfo=timezone(timedelta(hours=2))
            ),
            "due_at": datetime(2026, 3, 29, 1, 30, 1, 999999, tzinfo=timezone.utc),
            "kind": Kind.TASK,
            "max_attempts": 4,
            "overlap": Overlap.QUEUE,
            "payload": {"to": "a@b.c", "t": (1, 2), "big": 1e20, "s": "héllo ✓"},
            "max_crashes": 0,
        }
        single, _ = await store.occurrence_insert(new_occurrence("single", **fields))
        assert await store.occurrence_insert_many([new_occurrence("bulk", **fields)]) == 1
        (bulk,) = [o for o in await store.occurrence_list() if o.dedupe_key == "bulk"]
        assert bulk.id != single.id
        assert replace(bulk, id=single.id, dedupe_key="single") == single
        assert await store.occurrence_get(bulk.id) == bulk
        assert bulk.created_at == at(5) and bulk.payload["t"] == [1, 2]
        assert bulk.plan_time.utcoffset() == timedelta(0)

    async def test_every_insert_path_stores_max_crashes(self, store: Store) -> None:
        """occurrence_insert, insert_many (values shared by the batch or not) and
        plan_advance each store the item's max_crashes; every row starts with 0 crashes."""
        await store.occurrence_insert(new_occurrence("one", max_crashes=0))
        mixed = [new_occurrence(f"mixed{n}", max_crashes=n) for n in (5, 1, 0)]
        assert await store.occurrence_insert_many(mixed) == 3
        shared = [new_occurrence(f"shared{n}", max_crashes=9) for n in range(3)]
        assert await store.occurrence_insert_many(shared) == 3
        planned = [new_occurrence(f"plan{n}", due_at=at(n), max_crashes=n) for n in (2, 4)]
        assert await store.plan_advance(PlanAdvance("job", "", None, at(4), 2, planned))
        await store.occurrence_insert(new_occurrence("default"))
        stored = {o.dedupe_key: o for o in await store.occurrence_list()}
        expected = {"one": 0, "mixed5": 5, "mixed1": 1, "mixed0": 0, "plan2": 2, "plan4": 4}
        expected |= {f"shared{n}": 9 for n in range(3)} | {"default": DEFAULT_MAX_CRASHES}
        assert {key: occ.max_crashes for key, occ in stored.items()} == expected
        assert {occ.crashes for occ in stored.values()} == {0}

    async def test_insert_many_of_nothing_is_zero(self, store: Store) -> None:
        """An empty batch creates nothing and returns 0."""
        assert await store.occurrence_insert_many([]) == 0
        assert await store.occurrence_list() == []

    async def test_insert_many_rejects_the_whole_batch_on_bad_input(self, store: Store) -> None:
        """One item with a non-JSON payload or a naive time fails the batch: nothing stored."""
        good = new_occurrence("good")
        with pytest.raises(PayloadError, match="bad"):
            await store.occurrence_insert_many(
                [good, new_occurrence("bad", payload={"x": object()})]
            )
        with pytest.raises(ValueError, match="aware"):
            naive = new_occurrence("naive", due_at=datetime(2026, 1, 1))
            await store.occurrence_insert_many([good, naive])
        assert await store.occurrence_list() == []

    async def test_insert_many_large_batch_is_stored_whole(self, store: Store) -> None:
        """A batch of 2,000 is stored whole, and its rows are claimed like any other."""
        items = [new_occurrence(f"k{n:04}", due_at=at(n)) for n in range(2000)]
        assert await store.occurrence_insert_many(items) == 2000
        assert await store.occurrence_insert_many(items[::3]) == 0
        assert len(await store.occurrence_list(limit=5000)) == 2000
        claimed = await claim(store, limit=10, now=at(1))
        assert [o.dedupe_key for o in claimed] == ["k0000", "k0001"]

    async def test_racing_insert_many_create_each_key_once(
        self, store: Store, store2: Store
    ) -> None:
        """Overlapping batches from two handles at once: each key created once, counts add up."""
        batches = [
            [new_occurrence(f"k{n:03}") for n in range(start, start + 300)]
            for start in (0, 100, 200, 50)
        ]
        results = await asyncio.gather(
            *(
                (store, store2)[i % 2].occurrence_insert_many(batch[:: 1 if i % 2 else -1])
                for i, batch in enumerate(batches)
            )
        )
        assert sum(results) == 500
        assert len(await store.occurrence_list(limit=1000)) == 500

    async def test_get_unknown_id_is_none(self, store: Store) -> None:
        """occurrence_get of an unknown id returns None."""
        assert await store.occurrence_get("0" * 32) is None

    # -- list -------------------------------------------------------------------------------
    async def test_list_is_newest_plan_time_first_ties_newest_created(
        self, store: Store, clock: FakeClock
    ) -> None:
        """occurrence_list orders by plan_time desc, then by creation desc."""
        old = (await insert(store, new_occurrence("old", plan_time=at(0))))[0]
        tie_a = (await insert(store, new_occurrence("tie-a", plan_time=at(10))))[0]
        clock.advance(1)
        tie_b = (await insert(store, new_occurrence("tie-b", plan_time=at(10))))[0]
        tie_c = (await insert(store, new_occurrence("tie-c", plan_time=at(10))))[0]
        new = (await insert(store, new_occurrence("new", plan_time=at(20))))[0]
        listed = await store.occurrence_list()
        assert [o.id for o in listed] == [new.id, tie_c.id, tie_b.id, tie_a.id, old.id]

    async def test_list_filters_by_job_and_state_and_limits(self, store: Store) -> None:
        """occurrence_list applies job, state and limit together."""
        a1, a2, a3, _ = await insert(
            store,
            new_occurrence("a1", job="a", due_at=at(1)),
            new_occurrence("a2", job="a", due_at=at(2)),
            new_occurrence("a3", job="a", due_at=at(3)),
            new_occurrence("b1", job="b", due_at=at(4)),
        )
        await claim(store, limit=1, now=at(1))
        assert [o.id for o in await store.occurrence_list(job="a")] == [a3.id, a2.id, a1.id]
        assert [o.id for o in await store.occurrence_list(job="a", limit=2)] == [a3.id, a2.id]
        running = await store.occurrence_list(state=State.RUNNING)
        assert [o.id for o in running] == [a1.id]
        scheduled_a = await store.occurrence_list(job="a", state=State.SCHEDULED)
        assert [o.id for o in scheduled_a] == [a3.id, a2.id]
        assert await store.occurrence_list(job="missing") == []
        assert await store.occurrence_list(limit=0) == []

    # -- next due ---------------------------------------------------------------------------
    async def test_next_due_is_the_earliest_claimable_of_the_tasks(self, store: Store) -> None:
        """next_due: earliest due_at among claimable rows of the tasks (past ones too)."""
        assert await store.occurrence_next_due(["task"], now=T0) is None
        await insert(
            store,
            new_occurrence("running", due_at=at(-50)),
            new_occurrence("other-task", task="other", due_at=at(-100)),
            new_occurrence("past", due_at=at(-10)),
            new_occurrence("future", due_at=at(60)),
        )
        await claim(store, limit=1, now=T0)  # takes "running" (due at -50)
        assert await store.occurrence_next_due(["task"], now=T0) == at(-10)
        assert await store.occurrence_next_due(["task", "other"], now=T0) == at(-100)
        assert await store.occurrence_next_due(["nothing"], now=T0) is None
        assert await store.occurrence_next_due([], now=T0) is None

    async def test_next_due_counts_a_retry_pending_row(self, store: Store) -> None:
        """A failed row waiting for its retry is claimable, so next_due reports its retry_at."""
        await insert(store, new_occurrence("k", max_attempts=2))
        (occ,) = await claim(store, now=T0)
        failed = Outcome(occ.id, occ.fencing_token, State.FAILED, retry_at=at(300))
        await store.occurrence_complete("i1", [failed], now=at(1))
        assert await store.occurrence_next_due(["task"], now=at(1)) == at(300)

    # -- planning cursors -------------------------------------------------------------------
    async def test_cursor_of_an_unplanned_stream_is_none(self, store: Store) -> None:
        """plan_cursor_get is None before the first plan_advance."""
        assert await store.plan_cursor_get("job", "") is None

    async def test_first_plan_advance_creates_cursor_and_rows(self, store: Store) -> None:
        """plan_advance with expected None creates the cursor and inserts the items."""
        items = [new_occurrence(f"job::{n}", due_at=at(n)) for n in (60, 120)]
        assert await store.plan_advance(PlanAdvance("job", "", None, at(120), 2, items))
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(120), 2)
        assert {o.dedupe_key for o in await store.occurrence_list()} == {"job::60", "job::120"}

    async def test_second_plan_advance_from_none_fails_and_inserts_nothing(
        self, store: Store
    ) -> None:
        """Once a cursor exists, expected None loses the compare-and-set; nothing inserted."""
        assert await store.plan_advance(
            PlanAdvance("job", "", None, at(60), 1, [new_occurrence("a")])
        )
        assert not await store.plan_advance(
            PlanAdvance("job", "", None, at(120), 1, [new_occurrence("b")])
        )
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(60), 1)
        assert [o.dedupe_key for o in await store.occurrence_list()] == ["a"]

    async def test_plan_advance_with_expected_moves_and_counts_accumulate(
        self, store: Store
    ) -> None:
        """Advancing from the current last_plan_time applies and adds to planned_count."""
        assert await store.plan_advance(
            PlanAdvance("job", "", None, at(60), 1, [new_occurrence("a")])
        )
        assert await store.plan_advance(
            PlanAdvance("job", "", at(60), at(180), 2, [new_occurrence("b")])
        )
        assert await store.plan_advance(PlanAdvance("job", "", at(180), at(240), 0, []))
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(240), 3)

    async def test_plan_advance_with_a_stale_expected_fails(self, store: Store) -> None:
        """A planner that read an old cursor changes nothing."""
        assert await store.plan_advance(PlanAdvance("job", "", None, at(60), 1, []))
        assert await store.plan_advance(PlanAdvance("job", "", at(60), at(120), 1, []))
        assert not await store.plan_advance(
            PlanAdvance("job", "", at(60), at(180), 1, [new_occurrence("x")])
        )
        assert not await store.plan_advance(
            PlanAdvance("new", "", at(60), at(180), 1, [new_occurrence("y")])
        )
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(120), 2)
        assert await store.plan_cursor_get("new", "") is None
        assert await store.occurrence_list() == []

    async def test_plan_advance_ignores_existing_dedupe_keys(self, store: Store) -> None:
        """Items whose key exists are skipped; the existing row is unchanged."""
        (existing,) = await insert(store, new_occurrence("dup", payload={"v": 1}))
        items = [new_occurrence("dup", payload={"v": 2}), new_occurrence("fresh")]
        assert await store.plan_advance(PlanAdvance("job", "", None, at(60), 2, items))
        assert await store.occurrence_get(existing.id) == existing
        assert sorted(o.dedupe_key for o in await store.occurrence_list()) == ["dup", "fresh"]

    async def test_cursors_are_per_job_and_scope(self, store: Store) -> None:
        """Each (job, scope) stream has its own cursor."""
        assert await store.plan_advance(PlanAdvance("job", "a", None, at(60), 1, []))
        assert await store.plan_advance(PlanAdvance("job", "b", None, at(30), 1, []))
        assert await store.plan_advance(PlanAdvance("other", "a", None, at(10), 1, []))
        assert await store.plan_cursor_get("job", "a") == PlanCursor("job", "a", at(60), 1)
        assert await store.plan_cursor_get("job", "b") == PlanCursor("job", "b", at(30), 1)
        assert await store.plan_cursor_get("other", "a") == PlanCursor("other", "a", at(10), 1)

    async def test_racing_planners_only_one_wins(self, store: Store, store2: Store) -> None:
        """Of several planners advancing the same cursor at once, exactly one applies."""
        results = await asyncio.gather(
            *(
                (store, store2)[n % 2].plan_advance(
                    PlanAdvance("job", "", None, at(60), 1, [new_occurrence(f"k{n}")])
                )
                for n in range(8)
            )
        )
        assert sum(results) == 1
        assert len(await store.occurrence_list()) == 1
        assert await store.plan_cursor_get("job", "") == PlanCursor("job", "", at(60), 1)
