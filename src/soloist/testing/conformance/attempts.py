"""Conformance: the audit log of attempts written with every write that ends an attempt."""

from __future__ import annotations

from soloist.models import CRASHED, Claimed, ErrorCode, Outcome, State
from soloist.stores.base import Store
from soloist.testing.conformance.base import T0, TTL, at, claim, insert, new_occurrence


class AttemptConformance:
    async def test_attempts_record_each_claim_until_success(self, store: Store) -> None:
        """A failed attempt, a reaped one (crashed: its attempt is run again) and the final
        success each leave one record."""
        await insert(store, new_occurrence("k", max_attempts=3))
        (first,) = await claim(store, instance="i1", now=T0)
        failed = Outcome(
            first.id, 1, State.FAILED, "handler_error", "ValueError: x", retry_at=at(5)
        )
        await store.occurrence_complete("i1", [failed], now=at(2))
        (second,) = await claim(store, instance="i2", now=at(5))
        assert second.fencing_token == 2
        await store.occurrence_reap(now=at(5) + TTL)
        (third,) = await claim(store, instance="i3", now=at(40))
        done = Outcome(third.id, third.fencing_token, State.SUCCEEDED, result="ok")
        await store.occurrence_complete("i3", [done], now=at(41))

        log = await store.occurrence_attempts(first.id)
        assert [
            (a.attempt, a.fencing_token, a.instance_id, a.outcome, a.error_code) for a in log
        ] == [
            (1, 1, "i1", "failed", "handler_error"),
            (2, 2, "i2", CRASHED, ErrorCode.LEASE_EXPIRED.value),
            (2, 3, "i3", "succeeded", None),
        ]
        assert [(a.started_at, a.finished_at) for a in log] == [
            (T0, at(2)),
            (at(5), at(5) + TTL),
            (at(40), at(41)),
        ]
        assert log[0].error_message == "ValueError: x"
        assert all(a.occurrence_id == first.id for a in log)

    async def test_fenced_out_write_logs_nothing(self, store: Store) -> None:
        """A stale runner's rejected completion adds no attempt record."""
        await insert(store, new_occurrence("k", max_attempts=2))
        (occ,) = await claim(store, instance="i1", now=T0)
        await store.occurrence_reap(now=T0 + TTL)
        stale = Outcome(occ.id, occ.fencing_token, State.SUCCEEDED)
        assert await store.occurrence_complete("i1", [stale], now=T0 + TTL) == set()
        log = await store.occurrence_attempts(occ.id)
        assert [(a.fencing_token, a.outcome) for a in log] == [(1, CRASHED)]

    async def test_release_and_dead_are_logged(self, store: Store) -> None:
        """A released attempt is logged as released; a reaped one past its crash budget
        (max_crashes=0) as dead with crash_loop."""
        await insert(store, new_occurrence("k", max_crashes=0))
        (occ,) = await claim(store, instance="i1", now=T0)
        await store.lease_release("i1", [Claimed(occ.id, occ.fencing_token)], now=at(1))
        (again,) = await claim(store, instance="i2", now=at(2))
        await store.occurrence_reap(now=at(2) + TTL)
        log = await store.occurrence_attempts(occ.id)
        assert [(a.attempt, a.outcome, a.error_code, a.finished_at) for a in log] == [
            (1, "released", ErrorCode.CANCELLED.value, at(1)),
            (1, "dead", ErrorCode.CRASH_LOOP.value, at(2) + TTL),
        ]
        assert again.fencing_token == 2

    async def test_no_attempts_for_unknown_or_unclaimed(self, store: Store) -> None:
        """An occurrence never claimed, or an unknown id, has an empty log."""
        (occ,) = await insert(store, new_occurrence("k"))
        assert await store.occurrence_attempts(occ.id) == []
        assert await store.occurrence_attempts("0" * 32) == []
