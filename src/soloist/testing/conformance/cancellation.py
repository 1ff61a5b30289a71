"""Conformance: cancelling occurrences (``Store.occurrence_cancel``), the flag a runner
learns from its lease renewals, and the rule that a row whose cancellation was requested
never becomes claimable again (complete, release, reap)."""

from __future__ import annotations

import asyncio

from soloist.models import (
    CANCELLED_MESSAGE,
    Claimed,
    ErrorCode,
    Occurrence,
    Outcome,
    State,
)
from soloist.stores.base import Store
from soloist.testing.conformance.base import T0, TTL, at, claim, insert, new_occurrence

CANCELLED = ErrorCode.CANCELLED.value


def _held(occ: Occurrence) -> Claimed:
    return Claimed(occ.id, occ.fencing_token)


async def _running(store: Store, key: str = "k", max_attempts: int = 1) -> Occurrence:
    await insert(store, new_occurrence(key, max_attempts=max_attempts))
    (occ,) = await claim(store, instance="i1", now=T0)
    return occ


class CancelConformance:
    async def test_cancel_a_scheduled_occurrence(self, store: Store) -> None:
        """A scheduled occurrence becomes dead (cancelled) at once and is never claimed."""
        (occ,) = await insert(store, new_occurrence("k"))
        answer = await store.occurrence_cancel(occ.id, now=at(5))
        assert answer is not None
        cancelled, changed = answer
        assert changed
        assert (cancelled.state, cancelled.error_code) == (State.DEAD, CANCELLED)
        assert cancelled.error_message == CANCELLED_MESSAGE
        assert cancelled.finished_at == at(5) and cancelled.cancel_requested
        assert cancelled.attempt == 0 and cancelled.fencing_token == 0
        assert await store.occurrence_get(occ.id) == cancelled
        assert await claim(store, now=at(10)) == []
        assert await store.occurrence_next_due(["task"]) is None
        assert await store.occurrence_attempts(occ.id) == []
        counts = await store.occurrence_counts(now=at(10))
        assert counts.by_job_state == {("job", State.DEAD): 1} and counts.due == 0
        # Cancelling again changes nothing.
        assert await store.occurrence_cancel(occ.id, now=at(6)) == (cancelled, False)

    async def test_cancel_a_pending_retry(self, store: Store) -> None:
        """An occurrence waiting for its retry (failed) is cancelled too: never retried."""
        occ = await _running(store, max_attempts=3)
        failed = Outcome(occ.id, occ.fencing_token, State.FAILED, "handler_error", "boom")
        await store.occurrence_complete("i1", [failed], now=at(1))
        answer = await store.occurrence_cancel(occ.id, now=at(2))
        assert answer is not None and answer[1]
        assert (answer[0].state, answer[0].error_code) == (State.DEAD, CANCELLED)
        assert answer[0].attempt == 1
        assert await claim(store, now=at(100)) == []

    async def test_cancel_a_running_occurrence_sets_the_flag_renew_reports(
        self, store: Store
    ) -> None:
        """A running occurrence keeps running (lease, runner and token unchanged) with
        cancel_requested set; the next renewal still renews it and reports the flag."""
        occ = await _running(store)
        (other,) = await insert(store, new_occurrence("other"))
        (other,) = await claim(store, instance="i1", now=at(1))
        answer = await store.occurrence_cancel(occ.id, now=at(2))
        assert answer is not None
        requested, changed = answer
        assert changed and requested.cancel_requested
        assert requested.state == State.RUNNING
        assert requested.lease_expires_at == occ.lease_expires_at
        assert (requested.instance_id, requested.fencing_token) == ("i1", occ.fencing_token)
        assert requested.finished_at is None and requested.error_code is None
        renewed = await store.lease_renew("i1", [_held(occ), _held(other)], TTL, now=at(3))
        assert renewed == {occ.id, other.id}
        assert renewed.cancel_requested == {occ.id}
        stored = await store.occurrence_get(occ.id)
        assert stored is not None and stored.lease_expires_at == at(3) + TTL
        # Asked twice: nothing changes. A renewal by the wrong runner reports nothing.
        assert await store.occurrence_cancel(occ.id, now=at(4)) == (stored, False)
        stale = await store.lease_renew("i2", [_held(occ)], TTL, now=at(5))
        assert stale == set() and stale.cancel_requested == frozenset()

    async def test_a_cancelled_run_records_its_outcome_and_is_not_retried(
        self, store: Store
    ) -> None:
        """The runner's cancelled outcome is written fenced; a retry it would have asked
        for (a failed outcome sent before it learnt of the cancel) becomes dead."""
        first = await _running(store, "a", max_attempts=3)
        await insert(store, new_occurrence("b", max_attempts=3))
        (second,) = await claim(store, instance="i1", now=at(1))
        for occ in (first, second):
            await store.occurrence_cancel(occ.id, now=at(2))
        outcomes = [
            Outcome(first.id, first.fencing_token, State.DEAD, CANCELLED, "cancelled on request"),
            Outcome(second.id, second.fencing_token, State.FAILED, "handler_error", "boom"),
        ]
        assert await store.occurrence_complete("i1", outcomes, now=at(3)) == {first.id, second.id}
        for occ, message in ((first, "cancelled on request"), (second, "boom")):
            stored = await store.occurrence_get(occ.id)
            assert stored is not None
            assert (stored.state, stored.error_code) == (State.DEAD, CANCELLED)
            assert stored.error_message == message and stored.finished_at == at(3)
            (record,) = await store.occurrence_attempts(occ.id)
            assert (record.outcome, record.error_code) == ("dead", CANCELLED)
        assert await claim(store, now=at(100)) == []

    async def test_a_cancelled_run_that_succeeds_is_recorded_succeeded(self, store: Store) -> None:
        """Cancelling a run only asks: a run that finishes anyway records its success."""
        occ = await _running(store)
        await store.occurrence_cancel(occ.id, now=at(1))
        done = Outcome(occ.id, occ.fencing_token, State.SUCCEEDED, result={"n": 1})
        assert await store.occurrence_complete("i1", [done], now=at(2)) == {occ.id}
        stored = await store.occurrence_get(occ.id)
        assert stored is not None and stored.state == State.SUCCEEDED

    async def test_a_released_cancelled_run_is_not_given_back(self, store: Store) -> None:
        """lease_release of a run whose cancellation was requested ends it dead
        (cancelled): it is not claimable again."""
        occ = await _running(store)
        await store.occurrence_cancel(occ.id, now=at(1))
        assert await store.lease_release("i1", [_held(occ)], now=at(2)) == {occ.id}
        stored = await store.occurrence_get(occ.id)
        assert stored is not None
        assert (stored.state, stored.error_code) == (State.DEAD, CANCELLED)
        assert stored.finished_at == at(2)
        (record,) = await store.occurrence_attempts(occ.id)
        assert (record.outcome, record.error_code) == ("dead", CANCELLED)
        assert await claim(store, now=at(3)) == []

    async def test_a_reaped_cancelled_run_does_not_run_again(self, store: Store) -> None:
        """An expired lease of a run whose cancellation was requested (its runner died)
        ends it dead (cancelled), whatever its crash budget."""
        occ = await _running(store)
        await store.occurrence_cancel(occ.id, now=at(1))
        (reaped,) = await store.occurrence_reap(now=at(60))
        assert (reaped.id, reaped.state, reaped.error_code) == (occ.id, State.DEAD, CANCELLED)
        assert reaped.crashes == 1 and reaped.finished_at == at(60)
        (record,) = await store.occurrence_attempts(occ.id)
        assert (record.outcome, record.error_code) == ("dead", CANCELLED)
        assert await claim(store, now=at(61)) == []

    async def test_cancel_a_finished_occurrence_changes_nothing(self, store: Store) -> None:
        """succeeded, dead or skipped: the cancel is refused (unchanged, False)."""
        occ = await _running(store)
        done = Outcome(occ.id, occ.fencing_token, State.SUCCEEDED)
        await store.occurrence_complete("i1", [done], now=at(1))
        stored = await store.occurrence_get(occ.id)
        assert stored is not None
        assert await store.occurrence_cancel(occ.id, now=at(2)) == (stored, False)
        assert await store.occurrence_get(occ.id) == stored

    async def test_cancel_an_unknown_occurrence(self, store: Store) -> None:
        """An id no occurrence has: None, nothing written."""
        assert await store.occurrence_cancel("0" * 32) is None

    async def test_cancel_racing_a_claim(self, store: Store, store2: Store) -> None:
        """A cancel and a claim at once, from two handles: either the cancel wins (dead,
        never claimed) or the claim does (running, its cancellation requested); never
        both, never neither."""
        for round_ in range(8):
            (occ,) = await insert(store, new_occurrence(f"race-{round_}"))
            claimed, answer = await asyncio.gather(
                claim(store, instance="i1"), store2.occurrence_cancel(occ.id)
            )
            assert answer is not None
            after, changed = answer
            assert changed
            stored = await store.occurrence_get(occ.id)
            assert stored is not None and stored.cancel_requested
            if claimed:
                assert [c.id for c in claimed] == [occ.id]
                assert after.state == stored.state == State.RUNNING
                renewed = await store.lease_renew("i1", [_held(claimed[0])], TTL)
                assert renewed.cancel_requested == {occ.id}
                done = Outcome(occ.id, claimed[0].fencing_token, State.DEAD, CANCELLED, "x")
                await store.occurrence_complete("i1", [done])
            else:
                assert after.state == stored.state == State.DEAD
                assert stored.error_code == CANCELLED
            assert await claim(store, instance="i2") == []
