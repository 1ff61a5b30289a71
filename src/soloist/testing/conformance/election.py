"""Conformance: leader election, a lease per election name fenced by a growing epoch."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from datetime import datetime, timedelta

import pytest

from soloist.models import LeaderLease
from soloist.stores.base import Store
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import T0, at

#: The leader lease time to live used by these tests.
LEASE = timedelta(seconds=15)


async def elect(
    store: Store, instance: str, now: datetime, name: str = "main"
) -> LeaderLease | None:
    return await store.leader_attempt_elect(name, instance, LEASE, now=now)


class ElectionConformance:
    async def test_first_elect_gets_epoch_one(self, store: Store) -> None:
        """The first candidate takes a new election: epoch 1, elected now, until now + ttl."""
        now = T0 + timedelta(microseconds=7)
        lease = await elect(store, "a", now)
        assert lease == LeaderLease("main", "a", 1, now, now + LEASE)
        assert lease.elected_at.utcoffset() == timedelta(0)
        assert await store.leader_get("main", now=now) == lease

    async def test_a_valid_lease_cannot_be_taken(self, store: Store, store2: Store) -> None:
        """While the lease is valid, another instance's elect returns None and changes nothing."""
        lease = await elect(store, "a", T0)
        almost = T0 + LEASE - timedelta(microseconds=1)
        assert await elect(store2, "b", at(1)) is None
        assert await elect(store2, "b", almost) is None
        assert await store2.leader_get("main", now=almost) == lease

    async def test_an_expired_lease_passes_with_the_next_epoch(
        self, store: Store, store2: Store
    ) -> None:
        """At expiry (inclusive) another instance takes the lease with epoch 2; the old holder's
        renew with epoch 1 and its elect now fail."""
        await elect(store, "a", T0)
        expiry = T0 + LEASE
        assert await store.leader_get("main", now=expiry) is None
        taken = await elect(store2, "b", expiry)
        assert taken == LeaderLease("main", "b", 2, expiry, expiry + LEASE)
        assert await store.leader_renew("main", "a", 1, LEASE, now=expiry) is None
        assert await elect(store, "a", expiry + timedelta(seconds=1)) is None
        assert await store.leader_get("main", now=expiry) == taken

    async def test_the_holder_re_electing_extends_with_the_same_epoch(self, store: Store) -> None:
        """Elect by the holder of a valid lease extends it; epoch and elected_at stay."""
        await elect(store, "a", T0)
        again = await elect(store, "a", at(10))
        assert again == LeaderLease("main", "a", 1, T0, at(10) + LEASE)
        assert await store.leader_get("main", now=at(20)) == again

    async def test_the_holder_re_electing_after_expiry_gets_a_new_epoch(self, store: Store) -> None:
        """A holder whose lease lapsed starts a new term: epoch + 1, elected now."""
        await elect(store, "a", T0)
        later = T0 + LEASE + timedelta(seconds=1)
        assert await elect(store, "a", later) == LeaderLease("main", "a", 2, later, later + LEASE)

    async def test_renew_extends_the_lease(self, store: Store, store2: Store) -> None:
        """Renew by the holder with its epoch moves expiry to now + ttl, keeping the rest."""
        await elect(store, "a", T0)
        renewed = await store.leader_renew("main", "a", 1, LEASE, now=at(10))
        assert renewed == LeaderLease("main", "a", 1, T0, at(10) + LEASE)
        assert await elect(store2, "b", at(20)) is None
        assert await store2.leader_get("main", now=at(20)) == renewed

    async def test_renew_with_a_wrong_epoch_or_instance_fails(self, store: Store) -> None:
        """Renew fails (None) for a wrong epoch, another instance or an unknown election."""
        lease = await elect(store, "a", T0)
        assert await store.leader_renew("main", "a", 2, LEASE, now=at(1)) is None
        assert await store.leader_renew("main", "a", 0, LEASE, now=at(1)) is None
        assert await store.leader_renew("main", "b", 1, LEASE, now=at(1)) is None
        assert await store.leader_renew("other", "a", 1, LEASE, now=at(1)) is None
        assert await store.leader_get("main", now=at(1)) == lease

    async def test_renew_after_expiry_fails_even_if_nobody_took_over(self, store: Store) -> None:
        """A lapsed lease cannot be renewed: the holder must elect again, with a new epoch."""
        await elect(store, "a", T0)
        assert await store.leader_renew("main", "a", 1, LEASE, now=T0 + LEASE) is None
        assert await store.leader_get("main", now=T0 + LEASE) is None
        lease = await elect(store, "a", T0 + LEASE)
        assert lease is not None and lease.epoch == 2

    async def test_resign_frees_the_lease_at_once(self, store: Store, store2: Store) -> None:
        """After resign nobody leads; the next elect, by anyone, gets a higher epoch."""
        await elect(store, "a", T0)
        assert await store.leader_resign("main", "a", 1, now=at(5)) is True
        assert await store.leader_get("main", now=at(5)) is None
        assert await store.leader_renew("main", "a", 1, LEASE, now=at(5)) is None
        same = await elect(store, "a", at(5))
        assert same == LeaderLease("main", "a", 2, at(5), at(5) + LEASE)
        assert await store.leader_resign("main", "a", 2, now=at(6)) is True
        other = await elect(store2, "b", at(6))
        assert other == LeaderLease("main", "b", 3, at(6), at(6) + LEASE)

    async def test_resign_by_a_non_holder_changes_nothing(self, store: Store) -> None:
        """Resign with another instance or epoch returns False; resigning twice, False."""
        lease = await elect(store, "a", T0)
        assert await store.leader_resign("main", "b", 1, now=at(1)) is False
        assert await store.leader_resign("main", "a", 2, now=at(1)) is False
        assert await store.leader_resign("other", "a", 1, now=at(1)) is False
        assert await store.leader_get("main", now=at(1)) == lease
        assert await store.leader_resign("main", "a", 1, now=at(2)) is True
        assert await store.leader_resign("main", "a", 1, now=at(2)) is False

    async def test_leader_get_is_none_when_nobody_leads(self, store: Store) -> None:
        """leader_get: None for an unknown election and for an expired lease."""
        assert await store.leader_get("main", now=T0) is None
        await elect(store, "a", T0)
        assert await store.leader_get("main", now=at(14)) is not None
        assert await store.leader_get("main", now=at(15)) is None

    async def test_elections_are_independent(self, store: Store) -> None:
        """Each election name has its own holder and epochs."""
        x = await elect(store, "a", T0, name="x")
        y = await elect(store, "b", T0, name="y")
        assert (x, y) == (
            LeaderLease("x", "a", 1, T0, T0 + LEASE),
            LeaderLease("y", "b", 1, T0, T0 + LEASE),
        )
        assert await store.leader_resign("x", "a", 1, now=at(1)) is True
        assert await store.leader_get("y", now=at(1)) == y
        assert await elect(store, "c", at(1), name="y") is None
        taken = await elect(store, "b", at(1), name="x")
        assert taken is not None and taken.epoch == 2
        assert (await store.leader_renew("y", "b", 1, LEASE, now=at(2))) is not None

    async def test_election_defaults_to_the_store_clock(
        self, store: Store, clock: FakeClock
    ) -> None:
        """Without now=, elect, renew, get and resign read the store's clock."""
        clock.advance(10)
        lease = await store.leader_attempt_elect("main", "a", LEASE)
        assert lease == LeaderLease("main", "a", 1, at(10), at(25))
        clock.advance(10)
        renewed = await store.leader_renew("main", "a", 1, LEASE)
        assert renewed is not None and renewed.expires_at == at(35)
        assert await store.leader_get("main") == renewed
        clock.advance(15)
        assert await store.leader_get("main") is None
        again = await store.leader_attempt_elect("main", "a", LEASE)
        assert again is not None and again.epoch == 2
        assert await store.leader_resign("main", "a", 2) is True
        assert await store.leader_get("main") is None

    async def test_bad_arguments_are_rejected(self, store: Store) -> None:
        """A ttl that is not positive, or a naive now, raises ValueError and takes nothing."""
        with pytest.raises(ValueError, match="ttl"):
            await store.leader_attempt_elect("main", "a", timedelta(0), now=T0)
        with pytest.raises(ValueError, match="aware"):
            await store.leader_attempt_elect("main", "a", LEASE, now=datetime(2026, 1, 1))
        assert await store.leader_get("main", now=T0) is None

    async def test_concurrent_elects_have_one_winner_per_epoch(
        self, store: Store, store2: Store
    ) -> None:
        """Sixteen candidates on two handles electing at the same instant: exactly one wins
        each round, with the next epoch; no epoch ever has two holders."""
        holders: defaultdict[int, set[str]] = defaultdict(set)
        for round_ in range(1, 6):
            now = at(round_ * 100)  # the previous round's lease has expired
            leases = await asyncio.gather(
                *(
                    (store, store2)[n % 2].leader_attempt_elect("main", f"c{n}", LEASE, now=now)
                    for n in range(16)
                )
            )
            won = [lease for lease in leases if lease is not None]
            assert len(won) == 1, f"round {round_}: {won}"
            assert won[0].epoch == round_
            assert await store2.leader_get("main", now=now) == won[0]
            holders[won[0].epoch].add(won[0].leader_id)
        assert all(len(ids) == 1 for ids in holders.values())
