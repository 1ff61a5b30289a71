"""Conformance: fenced runner writes (renew, complete, release) and reaping expired leases
(a crash is not a failure: see ``Store.occurrence_reap``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from soloist.errors import PayloadError
from soloist.models import (
    CRASHED,
    DEFAULT_MAX_CRASHES,
    Claimed,
    ErrorCode,
    Occurrence,
    Outcome,
    State,
)
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, TTL, at, claim, insert, new_occurrence


async def _running(store: Store, key: str = "k", max_attempts: int = 1) -> Occurrence:
    """Insert one occurrence due at T0 and claim it as ``i1`` at T0."""
    await insert(store, new_occurrence(key, max_attempts=max_attempts))
    (occ,) = await claim(store, instance="i1", now=T0)
    return occ


def _held(occ: Occurrence) -> Claimed:
    return Claimed(occ.id, occ.fencing_token)


class LeaseConformance:
    # -- renew ------------------------------------------------------------------------------
    async def test_renew_extends_a_held_lease(self, store: Store) -> None:
        """lease_renew moves the expiry to now + ttl for the holder."""
        occ = await _running(store)
        renewed = await store.lease_renew("i1", [_held(occ)], timedelta(seconds=60), now=at(20))
        assert renewed == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None and after.lease_expires_at == at(80)

    async def test_renew_is_fenced(self, store: Store) -> None:
        """Wrong token, wrong instance or a row no longer running: not renewed, unchanged."""
        occ = await _running(store)
        (done,) = await insert(store, new_occurrence("done"))
        (done,) = await claim(store, instance="i1", now=at(1))
        await store.occurrence_complete("i1", [Outcome(done.id, 1, State.SUCCEEDED)], now=at(2))
        stale = [Claimed(occ.id, occ.fencing_token + 1), _held(done), Claimed("0" * 32, 1)]
        assert await store.lease_renew("i1", stale, TTL, now=at(10)) == set()
        assert await store.lease_renew("i2", [_held(occ)], TTL, now=at(10)) == set()
        assert await store.occurrence_get(occ.id) == occ

    # -- complete -----------------------------------------------------------------------------
    async def test_complete_succeeded_is_terminal(self, store: Store) -> None:
        """succeeded: finished_at = now, result stored, lease cleared, never claimed again."""
        occ = await _running(store)
        outcome = Outcome(occ.id, occ.fencing_token, State.SUCCEEDED, result={"rows": 3})
        assert await store.occurrence_complete("i1", [outcome], now=at(4)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None
        assert (after.state, after.result, after.finished_at) == (
            State.SUCCEEDED,
            {"rows": 3},
            at(4),
        )
        assert after.lease_expires_at is None and after.duration == timedelta(seconds=4)
        assert (after.attempt, after.fencing_token, after.instance_id) == (1, 1, "i1")
        assert await claim(store, now=at(100)) == []

    async def test_complete_failed_retries_at_retry_at(self, store: Store) -> None:
        """failed: due again at retry_at, then claimed with attempt 2 and a higher token."""
        occ = await _running(store, max_attempts=3)
        outcome = Outcome(occ.id, 1, State.FAILED, "handler_error", "boom", retry_at=at(60))
        assert await store.occurrence_complete("i1", [outcome], now=at(5)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None
        assert (after.state, after.due_at, after.lease_expires_at) == (State.FAILED, at(60), None)
        assert (after.error_code, after.error_message) == ("handler_error", "boom")
        assert await claim(store, instance="i2", now=at(59)) == []
        (retry,) = await claim(store, instance="i2", now=at(60))
        assert (retry.id, retry.attempt, retry.instance_id) == (occ.id, 2, "i2")
        assert retry.fencing_token > occ.fencing_token

    async def test_complete_failed_without_retry_at_is_due_now(self, store: Store) -> None:
        """failed without retry_at is claimable at once."""
        occ = await _running(store, max_attempts=2)
        outcome = Outcome(occ.id, 1, State.FAILED, ErrorCode.TIMEOUT.value, "slow")
        await store.occurrence_complete("i1", [outcome], now=at(7))
        after = await store.occurrence_get(occ.id)
        assert after is not None and after.due_at == at(7)
        assert [o.id for o in await claim(store, now=at(7))] == [occ.id]

    async def test_complete_dead_is_terminal(self, store: Store) -> None:
        """dead: terminal with its error recorded and finished_at = now."""
        occ = await _running(store)
        outcome = Outcome(occ.id, 1, State.DEAD, "handler_panic", "segfault")
        assert await store.occurrence_complete("i1", [outcome], now=at(9)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None
        assert (after.state, after.error_code, after.error_message) == (
            State.DEAD,
            "handler_panic",
            "segfault",
        )
        assert after.finished_at == at(9)
        assert await claim(store, now=at(100)) == []

    async def test_complete_is_fenced(self, store: Store) -> None:
        """A completion with the wrong instance or token, or a second one, does not apply."""
        occ = await _running(store)
        assert (
            await store.occurrence_complete("i1", [Outcome(occ.id, 2, State.SUCCEEDED)], now=at(1))
            == set()
        )
        assert (
            await store.occurrence_complete("i2", [Outcome(occ.id, 1, State.SUCCEEDED)], now=at(1))
            == set()
        )
        assert await store.occurrence_get(occ.id) == occ
        assert await store.occurrence_complete(
            "i1", [Outcome(occ.id, 1, State.DEAD, "handler_error")], now=at(2)
        ) == {occ.id}
        assert (
            await store.occurrence_complete("i1", [Outcome(occ.id, 1, State.SUCCEEDED)], now=at(3))
            == set()
        )
        after = await store.occurrence_get(occ.id)
        assert after is not None and after.state == State.DEAD

    async def test_stale_runner_cannot_overwrite_after_reap_and_reclaim(self, store: Store) -> None:
        """A runner whose lease expired and was re-claimed elsewhere is fenced out."""
        old = await _running(store, max_attempts=2)
        assert [o.id for o in await store.occurrence_reap(now=T0 + TTL)] == [old.id]
        (new,) = await claim(store, instance="i2", now=T0 + TTL)
        assert new.fencing_token > old.fencing_token
        late = Outcome(old.id, old.fencing_token, State.SUCCEEDED, result="late")
        assert await store.occurrence_complete("i1", [late], now=at(40)) == set()
        assert await store.lease_renew("i1", [_held(old)], TTL, now=at(40)) == set()
        assert await store.lease_release("i1", [_held(old)], now=at(40)) == set()
        assert await store.occurrence_get(old.id) == new
        fresh = Outcome(new.id, new.fencing_token, State.SUCCEEDED, result="fresh")
        assert await store.occurrence_complete("i2", [fresh], now=at(41)) == {new.id}

    async def test_complete_applies_many_outcomes_at_once(self, store: Store) -> None:
        """One call records many outcomes and reports exactly those that applied."""
        await insert(store, *(new_occurrence(f"k{n}", max_attempts=2) for n in range(5)))
        occs = await claim(store, now=T0)
        outcomes = [
            Outcome(o.id, o.fencing_token, State.SUCCEEDED, result=n)
            for n, o in enumerate(occs[:3])
        ]
        outcomes.append(Outcome(occs[3].id, occs[3].fencing_token, State.FAILED, "timeout"))
        outcomes.append(Outcome(occs[4].id, 99, State.SUCCEEDED))  # stale token
        applied = await store.occurrence_complete("i1", outcomes, now=at(1))
        assert applied == {o.id for o in occs[:4]}
        states = {o.id: o.state for o in await store.occurrence_list()}
        assert [states[o.id] for o in occs] == [State.SUCCEEDED] * 3 + [State.FAILED, State.RUNNING]

    async def test_complete_rejects_bad_input_and_changes_nothing(self, store: Store) -> None:
        """A non-outcome state or a non-JSON result raises before anything is written."""
        occ = await _running(store)
        with pytest.raises(ValueError):
            await store.occurrence_complete("i1", [Outcome(occ.id, 1, State.RUNNING)], now=at(1))
        with pytest.raises(PayloadError):
            bad = Outcome(occ.id, 1, State.SUCCEEDED, result=object())
            await store.occurrence_complete("i1", [bad], now=at(1))
        assert await store.occurrence_get(occ.id) == occ

    # -- release ----------------------------------------------------------------------------
    async def test_release_of_a_first_attempt_makes_it_scheduled(self, store: Store) -> None:
        """lease_release: scheduled again at once, attempt not spent, error cancelled."""
        occ = await _running(store)
        assert await store.lease_release("i1", [_held(occ)], now=at(3)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None
        assert (after.state, after.attempt, after.lease_expires_at) == (State.SCHEDULED, 0, None)
        assert after.error_code == ErrorCode.CANCELLED.value
        (again,) = await claim(store, instance="i2", now=at(3))
        assert (again.attempt, again.fencing_token) == (1, 2)

    async def test_release_of_a_retry_makes_it_failed(self, store: Store) -> None:
        """Releasing attempt 2 leaves it failed (retry pending) at attempt 1, due at once."""
        occ = await _running(store, max_attempts=3)
        await store.occurrence_complete("i1", [Outcome(occ.id, 1, State.FAILED)], now=at(1))
        (retry,) = await claim(store, now=at(1))
        assert await store.lease_release("i1", [_held(retry)], now=at(2)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None and (after.state, after.attempt) == (State.FAILED, 1)
        (again,) = await claim(store, now=at(2))
        assert (again.attempt, again.fencing_token) == (2, 3)

    async def test_release_is_fenced(self, store: Store) -> None:
        """Release with a wrong instance or token changes nothing."""
        occ = await _running(store)
        assert await store.lease_release("i2", [_held(occ)], now=at(1)) == set()
        assert await store.lease_release("i1", [Claimed(occ.id, 5)], now=at(1)) == set()
        assert await store.occurrence_get(occ.id) == occ

    # -- reap -------------------------------------------------------------------------------
    async def test_reap_of_a_first_attempt_makes_it_scheduled_again(self, store: Store) -> None:
        """A crash is not a failure: scheduled again at once, attempt given back, crashes 1,
        due_at unchanged, lease cleared, lease_expired naming the runner and the count."""
        occ = await _running(store)
        (reaped,) = await store.occurrence_reap(now=at(31))
        assert (reaped.id, reaped.state, reaped.attempt) == (occ.id, State.SCHEDULED, 0)
        assert (reaped.crashes, reaped.max_crashes) == (1, DEFAULT_MAX_CRASHES)
        assert (reaped.due_at, reaped.lease_expires_at, reaped.finished_at) == (T0, None, None)
        assert reaped.error_code == ErrorCode.LEASE_EXPIRED.value
        assert reaped.error_message == "lease of i1 expired (crash 1 of 3 allowed)"
        assert await store.occurrence_get(occ.id) == reaped
        (again,) = await claim(store, instance="i2", now=at(31))
        assert (again.id, again.attempt, again.fencing_token) == (occ.id, 1, 2)
        assert (again.crashes, again.instance_id, again.error_code) == (1, "i2", None)
        (record,) = await store.occurrence_attempts(occ.id)
        assert (record.attempt, record.fencing_token, record.instance_id) == (1, 1, "i1")
        assert (record.outcome, record.error_code) == (CRASHED, ErrorCode.LEASE_EXPIRED.value)
        assert (record.started_at, record.finished_at) == (T0, at(31))
        assert record.error_message == reaped.error_message

    async def test_a_crash_spends_no_retry(self, store: Store) -> None:
        """With max_attempts=1 (retries=0) a crashed occurrence still runs again and its
        success is its first attempt."""
        occ = await _running(store, max_attempts=1)
        await store.occurrence_reap(now=T0 + TTL)
        (again,) = await claim(store, instance="i2", now=at(40))
        done = Outcome(again.id, again.fencing_token, State.SUCCEEDED, result="ok")
        assert await store.occurrence_complete("i2", [done], now=at(41)) == {occ.id}
        after = await store.occurrence_get(occ.id)
        assert after is not None
        assert (after.state, after.attempt, after.crashes) == (State.SUCCEEDED, 1, 1)
        log = await store.occurrence_attempts(occ.id)
        assert [(a.attempt, a.outcome) for a in log] == [(1, CRASHED), (1, "succeeded")]

    async def test_reap_of_a_retry_makes_it_failed(self, store: Store) -> None:
        """A crashed retry (attempt 2) is failed (retry pending) at attempt 1, still due at
        its retry time, and its next claim is attempt 2 again."""
        occ = await _running(store, max_attempts=3)
        failed = Outcome(occ.id, 1, State.FAILED, "handler_error", "boom", retry_at=at(5))
        await store.occurrence_complete("i1", [failed], now=at(1))
        (retry,) = await claim(store, instance="i2", now=at(5))
        assert retry.attempt == 2
        (reaped,) = await store.occurrence_reap(now=at(5) + TTL)
        assert (reaped.state, reaped.attempt, reaped.crashes) == (State.FAILED, 1, 1)
        assert (reaped.due_at, reaped.finished_at) == (at(5), None)
        assert reaped.error_message == "lease of i2 expired (crash 1 of 3 allowed)"
        (again,) = await claim(store, instance="i3", now=at(40))
        assert (again.attempt, again.fencing_token) == (2, 3)
        log = await store.occurrence_attempts(occ.id)
        assert [(a.attempt, a.instance_id, a.outcome) for a in log] == [
            (1, "i1", "failed"),
            (2, "i2", CRASHED),
        ]

    async def test_a_reaped_occurrence_keeps_its_place_in_the_backlog(self, store: Store) -> None:
        """due_at is unchanged by a reap: the crashed occurrence is claimed before one that
        became due after it (but before the reap)."""
        occ = await _running(store, key="first")
        await insert(store, new_occurrence("second", due_at=at(1)))
        await store.occurrence_reap(now=at(31))
        assert [o.id for o in await claim(store, limit=1, now=at(31))] == [occ.id]

    async def test_crash_loop_ends_dead_after_max_crashes(self, store: Store) -> None:
        """max_crashes (3) expiries each run it again; the next one makes it dead with
        crash_loop and finished_at = now, and its attempt record is dead."""
        occ = await _running(store)
        for crash in range(1, DEFAULT_MAX_CRASHES + 1):
            (reaped,) = await store.occurrence_reap(now=at(100 * crash))
            assert (reaped.state, reaped.attempt, reaped.crashes) == (State.SCHEDULED, 0, crash)
            (again,) = await claim(store, instance=f"i{crash + 1}", now=at(100 * crash))
            assert (again.attempt, again.fencing_token) == (1, crash + 1)
        (dead,) = await store.occurrence_reap(now=at(1000))
        assert (dead.state, dead.attempt, dead.crashes) == (State.DEAD, 1, 4)
        assert (dead.error_code, dead.finished_at) == (ErrorCode.CRASH_LOOP.value, at(1000))
        assert dead.lease_expires_at is None and dead.due_at == T0
        assert dead.error_message == (
            "lease of i4 expired (crash 4, max_crashes=3): its runner keeps dying"
        )
        assert await store.occurrence_get(occ.id) == dead
        assert await claim(store, now=at(2000)) == []
        log = await store.occurrence_attempts(occ.id)
        assert [(a.attempt, a.fencing_token, a.outcome, a.error_code) for a in log] == [
            *((1, n, CRASHED, ErrorCode.LEASE_EXPIRED.value) for n in (1, 2, 3)),
            (1, 4, "dead", ErrorCode.CRASH_LOOP.value),
        ]
        assert (log[-1].finished_at, log[-1].error_message) == (at(1000), dead.error_message)

    async def test_max_crashes_zero_makes_the_first_crash_final(self, store: Store) -> None:
        """max_crashes=0: no crash is survived, whatever attempts are left."""
        await insert(store, new_occurrence("k", max_attempts=5, max_crashes=0))
        (occ,) = await claim(store, now=T0)
        (dead,) = await store.occurrence_reap(now=at(45))
        assert (dead.id, dead.state, dead.error_code) == (
            occ.id,
            State.DEAD,
            ErrorCode.CRASH_LOOP.value,
        )
        assert (dead.attempt, dead.crashes, dead.max_crashes) == (1, 1, 0)
        assert (dead.finished_at, dead.lease_expires_at) == (at(45), None)
        assert await claim(store, now=at(46)) == []

    async def test_reap_returns_rows_by_plan_time(self, store: Store) -> None:
        """Several expired leases are reaped at once and returned by plan_time."""
        late = new_occurrence("late", plan_time=at(-1), due_at=T0)
        early = new_occurrence("early", plan_time=at(-9), due_at=at(-5))
        await insert(store, late, early)
        await claim(store, now=T0)
        reaped = await store.occurrence_reap(now=at(31))
        assert [o.dedupe_key for o in reaped] == ["early", "late"]
        assert all(o.state is State.SCHEDULED and o.crashes == 1 for o in reaped)

    async def test_reap_leaves_live_leases_alone(self, store: Store, clock: FakeClock) -> None:
        """Unexpired leases are untouched; expiry is inclusive (lease_expires_at <= now)."""
        occ = await _running(store)
        assert await store.occurrence_reap(now=T0 + TTL - timedelta(microseconds=1)) == []
        assert await store.occurrence_reap() == []  # the store clock is still at T0
        assert await store.occurrence_get(occ.id) == occ
        clock.advance(TTL)
        assert [o.id for o in await store.occurrence_reap()] == [occ.id]
        assert await store.occurrence_reap() == []

    async def test_renewed_lease_is_not_reaped(self, store: Store) -> None:
        """A heartbeat pushes the expiry out of the reaper's reach."""
        occ = await _running(store)
        await store.lease_renew("i1", [_held(occ)], TTL, now=at(20))
        assert await store.occurrence_reap(now=at(40)) == []
        assert len(await store.occurrence_reap(now=at(50))) == 1
