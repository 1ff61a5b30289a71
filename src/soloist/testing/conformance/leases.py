"""Conformance: fenced runner writes (renew, complete, release) and reaping expired leases."""

from __future__ import annotations

from datetime import timedelta

import pytest

from soloist.errors import PayloadError
from soloist.models import Claimed, ErrorCode, Occurrence, Outcome, State
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
    async def test_reap_fails_an_expired_lease_with_attempts_left(self, store: Store) -> None:
        """Expired with attempts left: failed, lease_expired, due now, returned as updated."""
        occ = await _running(store, max_attempts=2)
        (reaped,) = await store.occurrence_reap(now=at(31))
        assert reaped.id == occ.id
        assert (reaped.state, reaped.error_code) == (State.FAILED, ErrorCode.LEASE_EXPIRED.value)
        assert (reaped.due_at, reaped.lease_expires_at, reaped.finished_at) == (at(31), None, None)
        assert await store.occurrence_get(occ.id) == reaped
        (again,) = await claim(store, instance="i2", now=at(31))
        assert (again.attempt, again.fencing_token) == (2, 2)

    async def test_reap_kills_an_expired_last_attempt(self, store: Store) -> None:
        """Expired on its last attempt: dead, lease_expired, finished_at = now."""
        occ = await _running(store, max_attempts=1)
        (reaped,) = await store.occurrence_reap(now=at(45))
        assert (reaped.id, reaped.state) == (occ.id, State.DEAD)
        assert reaped.error_code == ErrorCode.LEASE_EXPIRED.value
        assert (reaped.finished_at, reaped.lease_expires_at) == (at(45), None)
        assert await claim(store, now=at(46)) == []

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
