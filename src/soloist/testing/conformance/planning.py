"""Conformance: the planning index (plan_due, plan_advance_many, plan_cursor_ensure, the
cursor job_add makes) and the planning partitions' leases (partition_sync,
partition_list)."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from soloist.errors import ConfigError
from soloist.models import (
    SLOTS,
    JobRecord,
    PartitionLease,
    PlanAdvance,
    PlanCursor,
    PlanFence,
    partition_slots,
    slot_partition,
    stream_slot,
)
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, TTL, at, new_occurrence

EVERY = {"kind": "every", "seconds": 60}


def _step(
    job: str, expected: int | None, new: int | None, nxt: int | None, **kw: object
) -> PlanAdvance:
    """A plan step of stream (job, "") in seconds after T0."""
    return PlanAdvance(
        job,
        "",
        at(expected) if expected is not None else None,
        at(new) if new is not None else None,
        int(kw.pop("count", 0)),  # type: ignore[call-overload]
        kw.pop("items", ()),  # type: ignore[arg-type]
        at(nxt) if nxt is not None else None,
        kw.pop("fence", None),  # type: ignore[arg-type]
    )


def _names(batch_streams: list) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(s.cursor.job, s.cursor.scope) for s in batch_streams]


class PlanningConformance:
    # -- the index ---------------------------------------------------------------------------
    async def test_plan_due_returns_due_streams_earliest_first_with_next_at(
        self, store: Store
    ) -> None:
        """plan_due: next_plan_time <= before, earliest first, at most limit; next_at is the
        earliest entry after before; a cursor out of the index (None) never shows."""
        assert (
            await store.plan_advance_many(
                [
                    _step("c", None, 0, 30),
                    _step("a", None, 0, 10),
                    _step("b", None, 0, 20),
                    _step("later", None, 0, 500),
                    _step("done", None, 0, None),
                ]
            )
            == [True] * 5
        )
        batch = await store.plan_due(at(25), 10)
        assert _names(batch.streams) == [("a", ""), ("b", "")]
        assert batch.streams[0].cursor == PlanCursor("a", "", at(0), 0, at(10))
        assert batch.next_at == at(30)
        limited = await store.plan_due(at(1000), 2)
        assert _names(limited.streams) == [("a", ""), ("b", "")]
        everything = await store.plan_due(at(1000), 100)
        assert _names(everything.streams) == [("a", ""), ("b", ""), ("c", ""), ("later", "")]
        assert everything.next_at is None

    async def test_plan_due_ties_order_by_job_then_scope(self, store: Store) -> None:
        """Streams due at the same time come by job, then scope."""
        steps = [
            PlanAdvance(j, s, None, at(0), 0, (), at(5))
            for j, s in [("b", "x"), ("a", "z"), ("a", "y")]
        ]
        assert all(await store.plan_advance_many(steps))
        batch = await store.plan_due(at(5), 10)
        assert _names(batch.streams) == [("a", "y"), ("a", "z"), ("b", "x")]

    async def test_plan_due_filters_by_slot_ranges(self, store: Store) -> None:
        """With slots, only cursors whose stream_slot falls in a range [lo, hi) show, and
        next_at looks only at those."""
        names = [f"job-{n}" for n in range(40)]
        assert all(await store.plan_advance_many([_step(n, None, 0, 10) for n in names]))
        assert all(await store.plan_advance_many([_step("z-later", None, 0, 99)]))
        half = [(0, SLOTS // 2)]
        batch = await store.plan_due(at(10), 100, half)
        want = sorted(n for n in names if stream_slot(n, "") < SLOTS // 2)
        assert 0 < len(want) < len(names)
        assert [s.cursor.job for s in batch.streams] == want
        later_slot = stream_slot("z-later", "")
        other = [(0, later_slot), (later_slot + 1, SLOTS)] if later_slot else [(1, SLOTS)]
        assert (await store.plan_due(at(10), 100, other)).next_at is None
        assert (await store.plan_due(at(10), 100, [(later_slot, later_slot + 1)])).next_at == at(99)

    async def test_plan_due_brings_the_job_record(self, store: Store) -> None:
        """Each due stream comes with its job's record, fresh (pause flag included), or
        None when the job has no record."""
        await store.job_upsert([JobRecord("coded", "coded", EVERY)])
        assert all(
            await store.plan_advance_many([_step("coded", None, 0, 5), _step("ghost", None, 0, 5)])
        )
        await store.job_set_paused("coded", True)
        batch = await store.plan_due(at(5), 10)
        jobs = {s.cursor.job: s.job for s in batch.streams}
        assert jobs["ghost"] is None
        assert jobs["coded"] is not None and jobs["coded"].paused
        assert jobs["coded"].schedule == EVERY

    async def test_plan_advance_many_applies_each_step_on_its_own(self, store: Store) -> None:
        """One step whose CAS fails does not stop the others; results come in order."""
        assert await store.plan_advance([_step("a", None, 60, 120)][0])
        items = [new_occurrence("b:120", job="b", due_at=at(120))]
        results = await store.plan_advance_many(
            [
                _step("a", None, 60, 120),  # stale: a was planned
                _step("b", None, 120, 180, count=1, items=items),
                _step("a", 60, 120, 180),
            ]
        )
        assert results == [False, True, True]
        assert await store.plan_cursor_get("a", "") == PlanCursor("a", "", at(120), 0, at(180))
        assert await store.plan_cursor_get("b", "") == PlanCursor("b", "", at(120), 1, at(180))
        counts = await store.occurrence_counts(now=at(0))
        assert sum(counts.by_job_state.values()) == 1

    async def test_an_ensured_cursor_counts_as_never_planned(self, store: Store) -> None:
        """A cursor made by plan_cursor_ensure has no last plan time: expected None
        matches it once, then the stream is planned and None no longer matches."""
        assert await store.plan_cursor_ensure([("a", ""), ("a", "t1")], at(7)) == 2
        assert await store.plan_cursor_get("a", "") == PlanCursor("a", "", None, 0, at(7))
        assert _names((await store.plan_due(at(7), 10)).streams) == [("a", ""), ("a", "t1")]
        assert await store.plan_advance_many(
            [_step("a", None, 60, 120), _step("a", None, 61, 121)]
        ) == [True, False]
        assert await store.plan_cursor_get("a", "") == PlanCursor("a", "", at(60), 0, at(120))

    async def test_plan_cursor_ensure_leaves_existing_cursors_unless_reviving(
        self, store: Store, clock: FakeClock
    ) -> None:
        """ensure creates only missing cursors (at the store's now by default); revive also
        brings a cursor out of the index (next None), or due later than ``at``, back to
        ``at``, and leaves one due earlier alone."""
        steps = [_step("out", None, 0, None), _step("in", None, 0, 50), _step("soon", None, 0, 5)]
        assert all(await store.plan_advance_many(steps))
        clock.advance(3)
        assert await store.plan_cursor_ensure([("out", ""), ("in", ""), ("new", "")]) == 1
        assert await store.plan_cursor_get("new", "") == PlanCursor("new", "", None, 0, at(3))
        assert (await store.plan_cursor_get("out", "")).next_plan_time is None  # type: ignore[union-attr]
        assert (await store.plan_cursor_get("in", "")).next_plan_time == at(50)  # type: ignore[union-attr]
        revived = await store.plan_cursor_ensure(
            [("out", ""), ("in", ""), ("soon", "")], at(9), revive=True
        )
        assert revived == 2
        assert await store.plan_cursor_get("out", "") == PlanCursor("out", "", at(0), 0, at(9))
        assert await store.plan_cursor_get("in", "") == PlanCursor("in", "", at(0), 0, at(9))
        assert (await store.plan_cursor_get("soon", "")).next_plan_time == at(5)  # type: ignore[union-attr]

    async def test_a_step_may_keep_a_never_planned_stream_unplanned(self, store: Store) -> None:
        """new_last None (with expected None) parks a never-planned stream: it moves in the
        index only; a stream that was planned must keep a last plan time."""
        await store.plan_cursor_ensure([("p", "")], at(0))
        assert await store.plan_advance(_step("p", None, None, 40))
        assert await store.plan_cursor_get("p", "") == PlanCursor("p", "", None, 0, at(40))
        with pytest.raises(ConfigError, match="new_last"):
            await store.plan_advance(_step("p", 0, None, 40))

    async def test_job_add_indexes_the_new_stream_at_its_creation(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A dynamic schedule is due in the index from when it was added, never planned;
        deleting it takes it out."""
        clock.advance(4)
        await store.job_add(JobRecord("dyn", "task", EVERY, dynamic=True))
        assert await store.plan_cursor_get("dyn", "") == PlanCursor("dyn", "", None, 0, at(4))
        batch = await store.plan_due(at(4), 10)
        assert _names(batch.streams) == [("dyn", "")]
        assert batch.streams[0].job is not None and batch.streams[0].job.dynamic
        assert await store.job_delete("dyn")
        assert (await store.plan_due(at(100), 10)).streams == []

    async def test_plan_due_costs_what_the_due_streams_cost(self, store: Store) -> None:
        """Many streams far in the future do not crowd out the due ones (the limit counts
        due streams, in order), and the filtered-out slots do not count either."""
        far = [_step(f"far-{n}", None, 0, 10_000 + n) for n in range(300)]
        near = [_step(f"near-{n}", None, 0, n) for n in range(5)]
        assert all(await store.plan_advance_many(far + near))
        batch = await store.plan_due(at(10), 3)
        assert [s.cursor.job for s in batch.streams] == ["near-0", "near-1", "near-2"]
        assert (await store.plan_due(at(10), 100)).next_at == at(10_000)

    # -- partitions --------------------------------------------------------------------------
    async def test_partition_sync_takes_free_partitions_and_leaves_held_ones(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Free partitions are taken at epoch 1; another holder's unexpired lease stays."""
        got = await store.partition_sync("a", [0, 1, 2], TTL)
        assert got == [PartitionLease(p, "a", 1, T0 + TTL) for p in (0, 1, 2)]
        got = await store.partition_sync("b", [2, 3], TTL)
        assert [(x.partition, x.holder, x.epoch) for x in got] == [
            (0, "a", 1),
            (1, "a", 1),
            (2, "a", 1),
            (3, "b", 1),
        ]
        assert got == await store.partition_list()

    async def test_partition_sync_renews_and_releases(self, store: Store, clock: FakeClock) -> None:
        """A holder's sync extends what it still wants (same epoch) and releases the rest at
        once; the next holder of a released partition gets epoch + 1."""
        await store.partition_sync("a", [0, 1], TTL)
        clock.advance(10)
        got = await store.partition_sync("a", [0], TTL)
        assert got == [PartitionLease(0, "a", 1, at(10) + TTL)]
        got = await store.partition_sync("b", [1], TTL)
        assert got[-1] == PartitionLease(1, "b", 2, at(10) + TTL)

    async def test_an_expired_partition_passes_on_with_a_new_epoch(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A lease that was not renewed expires on the store's clock; the next taker gets
        epoch + 1, and the old holder cannot renew it."""
        await store.partition_sync("a", [5], TTL)
        clock.advance(TTL.total_seconds())
        assert await store.partition_list() == []
        got = await store.partition_sync("b", [5], TTL)
        assert got == [PartitionLease(5, "b", 2, clock.now() + TTL)]
        got = await store.partition_sync("a", [5], TTL)
        assert got == [PartitionLease(5, "b", 2, clock.now() + TTL)]

    async def test_a_fence_stops_the_plans_of_a_lost_partition(
        self, store: Store, clock: FakeClock
    ) -> None:
        """A step fenced by (partition, epoch) applies while that lease holds, and not after
        it expired or passed on, or with a wrong epoch."""
        await store.partition_sync("a", [3], TTL)
        fence = PlanFence(3, 1)
        assert await store.plan_advance(_step("s", None, 0, 60, fence=fence))
        assert not await store.plan_advance(_step("s", 0, 60, 120, fence=PlanFence(3, 2)))
        assert not await store.plan_advance(_step("s", 0, 60, 120, fence=PlanFence(4, 1)))
        clock.advance(TTL.total_seconds())
        assert not await store.plan_advance(_step("s", 0, 60, 120, fence=fence))
        await store.partition_sync("b", [3], TTL)
        assert not await store.plan_advance(_step("s", 0, 60, 120, fence=fence))
        assert await store.plan_advance(_step("s", 0, 60, 120, fence=PlanFence(3, 2)))
        assert await store.plan_cursor_get("s", "") == PlanCursor("s", "", at(60), 0, at(120))

    async def test_partition_sync_races_give_each_partition_one_holder(
        self, store: Store, store2: Store
    ) -> None:
        """Two instances syncing the same partitions at once: each partition ends with one
        holder at epoch 1."""
        want = list(range(16))
        await asyncio.gather(
            *((store, store2)[n % 2].partition_sync(f"i{n % 2}", want, TTL) for n in range(8))
        )
        leases = await store.partition_list()
        assert [x.partition for x in leases] == want
        assert {x.epoch for x in leases} == {1}

    def test_partition_slots_cover_every_slot_once(self) -> None:
        """Partitions are ranges of slots: every slot is in exactly one, for any count."""
        for count in (1, 3, 64, 1000, SLOTS):
            ranges = [partition_slots(p, count) for p in range(count)]
            assert ranges[0][0] == 0 and ranges[-1][1] == SLOTS
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
            for slot in (0, 1, SLOTS // 3, SLOTS - 1):
                lo, hi = ranges[slot_partition(slot, count)]
                assert lo <= slot < hi
