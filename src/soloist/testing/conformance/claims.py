"""Conformance: claiming occurrences, including the overlap rules and racing claimers."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta

import pytest

from soloist.models import ErrorCode, Outcome, Overlap, State
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, TTL, at, claim, insert, new_occurrence


class ClaimConformance:
    async def test_claim_takes_only_due_rows(self, store: Store) -> None:
        """Rows with due_at <= now are claimed (the boundary included); later ones are not."""
        past, exact, _ = await insert(
            store,
            new_occurrence("past", due_at=at(-5)),
            new_occurrence("exact", due_at=at(10)),
            new_occurrence("future", due_at=at(10.000001)),
        )
        claimed = await claim(store, now=at(10))
        assert [o.id for o in claimed] == [past.id, exact.id]

    async def test_claim_takes_only_listed_tasks(self, store: Store) -> None:
        """Only occurrences of the given tasks are claimed."""
        mine, _ = await insert(
            store, new_occurrence("mine", task="a"), new_occurrence("theirs", task="b")
        )
        assert [o.id for o in await claim(store, tasks=["a", "c"], now=T0)] == [mine.id]
        assert await claim(store, tasks=[], now=T0) == []

    async def test_claim_orders_by_due_at_then_plan_time_up_to_limit(self, store: Store) -> None:
        """Claims go by due_at, then plan_time, and stop at limit."""
        late, tie_late_plan, tie_early_plan, early = await insert(
            store,
            new_occurrence("late", due_at=at(-1)),
            new_occurrence("tie2", due_at=at(-5), plan_time=at(-3)),
            new_occurrence("tie1", due_at=at(-5), plan_time=at(-4)),
            new_occurrence("early", due_at=at(-9)),
        )
        first = await claim(store, limit=3, now=T0)
        assert [o.id for o in first] == [early.id, tie_early_plan.id, tie_late_plan.id]
        assert [o.id for o in await claim(store, limit=3, now=T0)] == [late.id]
        assert await claim(store, limit=0, now=T0) == []

    async def test_claim_sets_the_running_fields(self, store: Store) -> None:
        """A claim: running, attempt+1, token+1, runner, started_at=now, lease=now+ttl."""
        (occ,) = await insert(store, new_occurrence("k", due_at=at(-1), max_attempts=3))
        (got,) = await claim(store, instance="runner-1", ttl=timedelta(seconds=45), now=at(7))
        assert got.id == occ.id
        assert (got.state, got.attempt, got.fencing_token) == (State.RUNNING, 1, 1)
        assert got.instance_id == "runner-1"
        assert got.started_at == at(7)
        assert got.lease_expires_at == at(52)
        assert got.finished_at is None
        assert await store.occurrence_get(occ.id) == got

    async def test_claim_defaults_to_the_store_clock(self, store: Store, clock: FakeClock) -> None:
        """Without now=, due-ness and lease expiry use the store's clock."""
        await insert(store, new_occurrence("k", due_at=at(60)))
        assert await claim(store) == []
        clock.advance(60)
        (got,) = await claim(store)
        assert got.started_at == at(60) and got.lease_expires_at == at(60) + TTL

    async def test_a_running_row_is_not_claimed_again(self, store: Store) -> None:
        """Once claimed, an occurrence is not claimable until it is released or reaped."""
        await insert(store, new_occurrence("k"))
        assert len(await claim(store, instance="a", now=T0)) == 1
        assert await claim(store, instance="b", now=at(1)) == []

    async def test_terminal_rows_are_not_claimed(self, store: Store) -> None:
        """Succeeded and dead occurrences are never claimed again."""
        await insert(store, *(new_occurrence(f"k{n}") for n in range(2)))
        first, second = await claim(store, now=T0)
        await store.occurrence_complete(
            "i1",
            [
                Outcome(first.id, first.fencing_token, State.SUCCEEDED),
                Outcome(second.id, second.fencing_token, State.DEAD, "handler_error", "boom"),
            ],
            now=at(1),
        )
        assert await claim(store, now=at(2)) == []

    async def test_racing_claimers_take_every_row_exactly_once(
        self, store: Store, store2: Store
    ) -> None:
        """Many concurrent claims from two handles: no row is claimed twice, none is lost."""
        await insert(store, *(new_occurrence(f"k{n}", due_at=at(-n)) for n in range(60)))
        handles = (store, store2)
        batches = await asyncio.gather(
            *(claim(handles[n % 2], instance=f"i{n}", limit=4, now=T0) for n in range(20))
        )
        counts = Counter(o.id for batch in batches for o in batch)
        assert counts and max(counts.values()) == 1
        assert len(counts) == 60
        running = await store.occurrence_list(state=State.RUNNING, limit=1000)
        assert {(o.attempt, o.fencing_token) for o in running} == {(1, 1)}

    async def test_reclaim_clears_the_previous_attempt(self, store: Store) -> None:
        """A retry's claim clears finished_at, error and result of the failed attempt."""
        await insert(store, new_occurrence("k", max_attempts=2))
        (occ,) = await claim(store, now=T0)
        failed = Outcome(occ.id, 1, State.FAILED, "handler_error", "boom", {"partial": 1}, at(5))
        assert await store.occurrence_complete("i1", [failed], now=at(1)) == {occ.id}
        (retry,) = await claim(store, now=at(5))
        assert (retry.attempt, retry.fencing_token, retry.started_at) == (2, 2, at(5))
        assert (retry.error_code, retry.error_message, retry.result) == (None, None, None)
        assert retry.finished_at is None

    # -- overlap ------------------------------------------------------------------------------
    async def test_overlap_skip_marks_the_new_one_skipped(self, store: Store) -> None:
        """overlap=skip: an occurrence that falls due while one of its job+scope runs (that
        started before it was due) becomes skipped."""
        await insert(store, new_occurrence("first", overlap=Overlap.SKIP))
        (running,) = await claim(store, now=T0)
        (second,) = await insert(
            store, new_occurrence("second", due_at=at(1), overlap=Overlap.SKIP)
        )
        assert await claim(store, now=at(3)) == []
        skipped = await store.occurrence_get(second.id)
        assert skipped is not None
        assert skipped.state == State.SKIPPED
        assert skipped.error_code == ErrorCode.OVERLAP.value
        assert skipped.finished_at == at(3)
        assert skipped.attempt == 0
        assert await store.occurrence_get(running.id) == running
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i1", [done], now=at(4))
        assert await claim(store, now=at(5)) == []  # skipped is final

    async def test_overlap_is_per_job_and_scope(self, store: Store) -> None:
        """A running occurrence only blocks its own job and scope."""
        await insert(store, new_occurrence("a", scope="s1", overlap=Overlap.SKIP))
        await claim(store, now=T0)
        other_scope, other_job = await insert(
            store,
            new_occurrence("b", scope="s2", overlap=Overlap.SKIP),
            new_occurrence("c", job="other", scope="s1", overlap=Overlap.SKIP),
        )
        claimed = await claim(store, now=at(1))
        assert {o.id for o in claimed} == {other_scope.id, other_job.id}

    async def test_overlap_queue_waits_for_the_running_one(self, store: Store) -> None:
        """overlap=queue: the new occurrence stays scheduled, then runs once the first ends."""
        await insert(store, new_occurrence("first", overlap=Overlap.QUEUE))
        (running,) = await claim(store, now=T0)
        (queued,) = await insert(store, new_occurrence("second", overlap=Overlap.QUEUE))
        assert await claim(store, now=at(1)) == []
        waiting = await store.occurrence_get(queued.id)
        assert waiting is not None and waiting.state == State.SCHEDULED
        assert (waiting.error_code, waiting.finished_at) == (None, None)
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i1", [done], now=at(2))
        assert [o.id for o in await claim(store, now=at(3))] == [queued.id]

    async def test_overlap_skip_holds_across_instances(self, store: Store, store2: Store) -> None:
        """overlap=skip across instances: while instance i1 runs an occurrence, a claim by
        instance i2 (another handle, as another process) skips the next one of its
        job+scope, and leaves i1's run alone."""
        await insert(store, new_occurrence("first", overlap=Overlap.SKIP))
        (running,) = await claim(store, instance="i1", now=T0)
        (second,) = await insert(
            store2, new_occurrence("second", due_at=at(1), overlap=Overlap.SKIP)
        )
        assert await claim(store2, instance="i2", now=at(3)) == []
        skipped = await store2.occurrence_get(second.id)
        assert skipped is not None
        assert (skipped.state, skipped.error_code) == (State.SKIPPED, ErrorCode.OVERLAP.value)
        assert await store.occurrence_get(running.id) == running
        # Once i1's run ends, i2 runs the job's next occurrence.
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        assert await store.occurrence_complete("i1", [done], now=at(4)) == {running.id}
        (third,) = await insert(store2, new_occurrence("third", due_at=at(5), overlap=Overlap.SKIP))
        assert [o.id for o in await claim(store2, instance="i2", now=at(5))] == [third.id]

    async def test_overlap_queue_holds_across_instances(self, store: Store, store2: Store) -> None:
        """overlap=queue across instances: while instance i1 runs an occurrence, a claim by
        instance i2 (another handle) leaves the next one scheduled; it runs once i1's run
        ends."""
        await insert(store, new_occurrence("first", overlap=Overlap.QUEUE))
        (running,) = await claim(store, instance="i1", now=T0)
        (queued,) = await insert(
            store2, new_occurrence("second", due_at=at(1), overlap=Overlap.QUEUE)
        )
        assert await claim(store2, instance="i2", now=at(2)) == []
        waiting = await store2.occurrence_get(queued.id)
        assert waiting is not None and waiting.state == State.SCHEDULED
        assert (waiting.attempt, waiting.error_code, waiting.finished_at) == (0, None, None)
        assert await store.occurrence_get(running.id) == running
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        assert await store.occurrence_complete("i1", [done], now=at(3)) == {running.id}
        (then,) = await claim(store2, instance="i2", now=at(4))
        assert (then.id, then.instance_id) == (queued.id, "i2")

    async def test_overlap_allow_runs_side_by_side(self, store: Store) -> None:
        """overlap=allow: occurrences of one job+scope are claimed together and while running."""
        await insert(store, new_occurrence("a"), new_occurrence("b"))
        assert len(await claim(store, now=T0)) == 2
        await insert(store, new_occurrence("c"))
        assert len(await claim(store, now=at(1))) == 1

    async def test_late_skip_occurrences_run_one_after_the_other(self, store: Store) -> None:
        """Several skip occurrences of one job+scope due at once (the claims fell behind),
        nothing running: a claim takes the first; the others are not skipped (nothing ran
        when they fell due) but wait, and run one after the other, in order."""
        due = await insert(
            store,
            *(new_occurrence(f"k{n}", due_at=at(n), overlap=Overlap.SKIP) for n in range(3)),
        )
        now = at(3)
        for n, occ in enumerate(due):
            (running,) = await claim(store, limit=10, now=now)
            assert running.id == occ.id
            for later in due[n + 1 :]:
                waiting = await store.occurrence_get(later.id)
                assert waiting is not None and waiting.state == State.SCHEDULED
                assert (waiting.error_code, waiting.finished_at) == (None, None)
            done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
            assert await store.occurrence_complete("i1", [done], now=now) == {running.id}
            now += timedelta(seconds=0.5)
        assert await store.occurrence_list(state=State.SKIPPED) == []

    async def test_a_skip_sibling_that_started_late_makes_it_wait(self, store: Store) -> None:
        """overlap=skip: a running sibling that started at or after a candidate's due time
        (both were late) holds it back like queue, without skipping it; one that started
        before the candidate's due time still skips it."""
        await insert(store, new_occurrence("first", due_at=T0, overlap=Overlap.SKIP))
        (running,) = await claim(store, now=at(2))  # started late, at 2
        late, exact = await insert(
            store,
            new_occurrence("late", due_at=at(1), overlap=Overlap.SKIP),
            new_occurrence("exact", due_at=at(2), overlap=Overlap.SKIP),
        )
        assert await claim(store, now=at(3)) == []
        for occ in (late, exact):
            waiting = await store.occurrence_get(occ.id)
            assert waiting is not None and waiting.state == State.SCHEDULED
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i1", [done], now=at(4))
        (second,) = await claim(store, now=at(5))
        assert second.id == late.id
        (then,) = await insert(store, new_occurrence("then", due_at=at(6), overlap=Overlap.SKIP))
        assert await claim(store, now=at(7)) == []
        after = await store.occurrence_get(then.id)  # due at 6 while "late" ran since 5
        assert after is not None and after.state == State.SKIPPED
        assert after.error_code == ErrorCode.OVERLAP.value
        still = await store.occurrence_get(exact.id)  # due at 2, before "late" started
        assert still is not None and still.state == State.SCHEDULED

    async def test_overlap_queue_within_one_batch(self, store: Store) -> None:
        """Two due queue occurrences of one job+scope in one claim: first runs, second waits."""
        first, second = await insert(
            store,
            new_occurrence("a", due_at=at(-2), overlap=Overlap.QUEUE),
            new_occurrence("b", due_at=at(-1), overlap=Overlap.QUEUE),
        )
        assert [o.id for o in await claim(store, now=T0)] == [first.id]
        after = await store.occurrence_get(second.id)
        assert after is not None and after.state == State.SCHEDULED

    async def test_an_allow_claim_in_the_batch_holds_back_a_later_skip(self, store: Store) -> None:
        """Any occurrence claimed earlier in the batch for the job+scope holds back a later
        skip one; it started after that one was due, so the skip one waits (not skipped)."""
        _, later = await insert(
            store,
            new_occurrence("a", due_at=at(-2), overlap=Overlap.ALLOW),
            new_occurrence("b", due_at=at(-1), overlap=Overlap.SKIP),
        )
        assert len(await claim(store, now=T0)) == 1
        after = await store.occurrence_get(later.id)
        assert after is not None and after.state == State.SCHEDULED

    async def test_overlap_skip_is_per_task(self, store: Store) -> None:
        """The overlap group is (job, scope, task) (local mode: each instance's copy of a job
        has a task of its own): a running occurrence does not make one of the same job and
        scope but another task skipped; one of the same task still is."""
        await insert(store, new_occurrence("run", task="a", overlap=Overlap.SKIP))
        (running,) = await claim(store, tasks=["a"], now=T0)
        other_task, same_task = await insert(
            store,
            new_occurrence("other", task="b", due_at=at(1), overlap=Overlap.SKIP),
            new_occurrence("same", task="a", due_at=at(1), overlap=Overlap.SKIP),
        )
        assert [o.id for o in await claim(store, tasks=["a", "b"], now=at(2))] == [other_task.id]
        after = await store.occurrence_get(same_task.id)
        assert after is not None and after.state == State.SKIPPED
        assert after.error_code == ErrorCode.OVERLAP.value
        assert await store.occurrence_get(running.id) == running
        # In one batch too: rows of two tasks both run, the later row of a task waits.
        first_a, first_b, second_a = await insert(
            store,
            new_occurrence("a1", job="batch", task="a", due_at=at(3), overlap=Overlap.SKIP),
            new_occurrence("b1", job="batch", task="b", due_at=at(4), overlap=Overlap.SKIP),
            new_occurrence("a2", job="batch", task="a", due_at=at(5), overlap=Overlap.SKIP),
        )
        claimed = await claim(store, tasks=["a", "b"], now=at(6))
        assert [o.id for o in claimed] == [first_a.id, first_b.id]
        after = await store.occurrence_get(second_a.id)
        assert after is not None and after.state == State.SCHEDULED

    async def test_overlap_queue_is_per_task(self, store: Store) -> None:
        """overlap=queue with the (job, scope, task) group: a running occurrence holds back
        only the same task's; an earlier due one of another task, not claimed by this
        claimer, holds back nothing."""
        await insert(store, new_occurrence("run", task="a", overlap=Overlap.QUEUE))
        (running,) = await claim(store, tasks=["a"], now=T0)
        other_task, same_task = await insert(
            store,
            new_occurrence("other", task="b", due_at=at(1), overlap=Overlap.QUEUE),
            new_occurrence("same", task="a", due_at=at(1), overlap=Overlap.QUEUE),
        )
        assert [o.id for o in await claim(store, tasks=["a", "b"], now=at(2))] == [other_task.id]
        waiting = await store.occurrence_get(same_task.id)
        assert waiting is not None and waiting.state == State.SCHEDULED
        done = Outcome(running.id, running.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i1", [done], now=at(3))
        assert [o.id for o in await claim(store, tasks=["a"], now=at(4))] == [same_task.id]
        # An earlier due queue row of task c (nobody claims c here) does not block task d's.
        _, mine = await insert(
            store,
            new_occurrence("c1", job="q", task="c", due_at=at(5), overlap=Overlap.QUEUE),
            new_occurrence("d1", job="q", task="d", due_at=at(6), overlap=Overlap.QUEUE),
        )
        assert [o.id for o in await claim(store, tasks=["d"], now=at(7))] == [mine.id]

    async def test_skipped_rows_do_not_use_up_the_limit(self, store: Store) -> None:
        """Skipped or queued candidates do not count toward limit; later ones are claimed."""
        await insert(store, new_occurrence("run", job="busy", due_at=at(-5), overlap=Overlap.SKIP))
        await claim(store, now=at(-5))
        await insert(
            store,
            new_occurrence("skip", job="busy", due_at=at(-3), overlap=Overlap.SKIP),
            new_occurrence("queue", job="busy", due_at=at(-2), overlap=Overlap.QUEUE),
        )
        (free,) = await insert(store, new_occurrence("free", job="idle", due_at=at(-1)))
        assert [o.id for o in await claim(store, limit=1, now=at(1))] == [free.id]

    # -- allow_only (claiming ahead) ----------------------------------------------------------
    async def test_allow_only_claims_only_allow_rows_and_leaves_the_others(
        self, store: Store
    ) -> None:
        """allow_only: of due allow, skip and queue rows only the allow ones are claimed, in
        due order; the others stay scheduled, untouched, even a skip row that a plain claim
        would skip (its sibling started before it was due)."""
        await insert(store, new_occurrence("run", job="s", due_at=at(-10), overlap=Overlap.SKIP))
        (running,) = await claim(store, now=at(-10))
        a1, s1, q1, a2, s2, a3 = await insert(
            store,
            new_occurrence("a1", job="a", due_at=at(-6)),
            new_occurrence("s1", job="s", due_at=at(-5), overlap=Overlap.SKIP),
            new_occurrence("q1", job="q", due_at=at(-4), overlap=Overlap.QUEUE),
            new_occurrence("a2", job="a", due_at=at(-3)),
            new_occurrence("s2", job="t", due_at=at(-2), overlap=Overlap.SKIP),
            new_occurrence("a3", job="b", due_at=at(-1)),
        )
        claimed = await claim(store, instance="ahead", allow_only=True, now=T0)
        assert [o.id for o in claimed] == [a1.id, a2.id, a3.id]
        for got in claimed:
            assert (got.state, got.attempt, got.fencing_token) == (State.RUNNING, 1, 1)
            assert (got.instance_id, got.started_at) == ("ahead", T0)
            assert got.lease_expires_at == T0 + TTL
            assert await store.occurrence_get(got.id) == got
        for occ in (s1, q1, s2):
            assert await store.occurrence_get(occ.id) == occ  # scheduled, attempt 0
            assert (occ.state, occ.attempt) == (State.SCHEDULED, 0)
        assert await store.occurrence_get(running.id) == running
        assert await claim(store, allow_only=True, now=at(1)) == []

    async def test_allow_only_limit_counts_allow_rows_only(self, store: Store) -> None:
        """allow_only: skip rows due first neither use up the limit nor hold anything
        back; the limit takes the earliest allow rows."""
        skips = await insert(
            store,
            *(
                new_occurrence(f"s{n}", job=f"s{n}", due_at=at(-20 + n), overlap=Overlap.SKIP)
                for n in range(3)
            ),
        )
        allows = await insert(
            store, *(new_occurrence(f"a{n}", due_at=at(-10 + n)) for n in range(5))
        )
        first = await claim(store, limit=2, allow_only=True, now=T0)
        assert [o.id for o in first] == [a.id for a in allows[:2]]
        second = await claim(store, limit=2, allow_only=True, now=T0)
        assert [o.id for o in second] == [a.id for a in allows[2:4]]
        for occ in skips:
            assert await store.occurrence_get(occ.id) == occ

    async def test_a_plain_claim_after_an_allow_only_claim_is_unchanged(self, store: Store) -> None:
        """After an allow_only claim, a plain claim applies the overlap rules as always:
        a skip row whose sibling ran when it was due is skipped, the first queue row of
        its group runs and the next waits, allow rows run."""
        await insert(store, new_occurrence("run", job="s", due_at=at(-10), overlap=Overlap.SKIP))
        await claim(store, now=at(-10))
        a1, s1, q1, q2, a2 = await insert(
            store,
            new_occurrence("a1", job="a", due_at=at(-6)),
            new_occurrence("s1", job="s", due_at=at(-5), overlap=Overlap.SKIP),
            new_occurrence("q1", job="q", due_at=at(-4), overlap=Overlap.QUEUE),
            new_occurrence("q2", job="q", due_at=at(-3), overlap=Overlap.QUEUE),
            new_occurrence("a2", job="a", due_at=at(-2)),
        )
        assert [o.id for o in await claim(store, limit=1, allow_only=True, now=T0)] == [a1.id]
        assert [o.id for o in await claim(store, now=at(1))] == [q1.id, a2.id]
        skipped = await store.occurrence_get(s1.id)
        assert skipped is not None and skipped.state == State.SKIPPED
        assert (skipped.error_code, skipped.finished_at) == (ErrorCode.OVERLAP.value, at(1))
        assert await store.occurrence_get(q2.id) == q2

    # -- waiting for work -------------------------------------------------------------------
    async def test_work_wait_returns_false_after_its_timeout(
        self, store: Store, clock: FakeClock
    ) -> None:
        """With no activity, work_wait returns False once its timeout has passed (a first
        call may return True at once: a store that notifies cannot know what it missed)."""
        await work_wait(store, clock, 0.05)
        assert await work_wait(store, clock, 0.05) is False
        assert await work_wait(store, clock, 0.05) is False

    async def test_work_wait_waits_and_can_be_cancelled(
        self, store: Store, clock: FakeClock
    ) -> None:
        """work_wait does not return before its timeout; cancelling it is safe."""
        await work_wait(store, clock, 0.05)
        waiter = asyncio.create_task(store.work_wait(60))
        done, _ = await asyncio.wait({waiter}, timeout=0.2)
        assert not done, "work_wait(60) returned with no activity and no time passed"
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await work_wait(store, clock, 0.05)
        assert await work_wait(store, clock, 0.05) is False
        (occ,) = await insert(store, new_occurrence("k"))
        assert [o.id for o in await claim(store, now=T0)] == [occ.id]


async def work_wait(store: Store, clock: FakeClock, timeout: float) -> bool:
    """``store.work_wait(timeout)``, moving the fake clock on until it returns (a store
    waiting on real time returns by itself); AssertionError after 5 real seconds."""
    waiter = asyncio.create_task(store.work_wait(timeout))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 5
    while not waiter.done():
        if loop.time() > deadline:
            waiter.cancel()
            raise AssertionError(f"work_wait({timeout}) did not return within 5 s")
        clock.advance(timeout)
        await asyncio.wait({waiter}, timeout=0.01)
    return waiter.result()
