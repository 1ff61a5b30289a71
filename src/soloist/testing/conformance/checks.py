"""Conformance: the core's checks hold on every store (see
:mod:`soloist.stores.core.checked`): bad arguments are refused, naming the value, before
anything is written, and empty input answers at once."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from soloist.errors import ConfigError
from soloist.models import Claimed, Outcome, PlanAdvance, State
from soloist.stores.base import Store
from soloist.testing.conformance.base import T0, TTL, at, claim, insert, new_occurrence

NAIVE = datetime(2026, 1, 1, 12, 0)


class CheckConformance:
    @pytest.mark.parametrize("ttl", [timedelta(0), timedelta(seconds=-1)])
    async def test_a_lease_ttl_that_is_not_positive_claims_and_renews_nothing(
        self, store: Store, ttl: timedelta
    ) -> None:
        """A claim or renewal with a lease born expired is refused; the row is untouched."""
        (occ,) = await insert(store, new_occurrence("k"))
        with pytest.raises(ConfigError, match="lease_ttl"):
            await claim(store, ttl=ttl, now=T0)
        assert (await store.occurrence_get(occ.id)).state == State.SCHEDULED  # type: ignore[union-attr]
        (running,) = await claim(store, now=T0)
        with pytest.raises(ConfigError, match="lease_ttl"):
            await store.lease_renew("i1", [Claimed(running.id, running.fencing_token)], ttl, T0)
        again = await store.occurrence_get(occ.id)
        assert again is not None and again.lease_expires_at == T0 + TTL

    async def test_a_naive_now_is_refused(self, store: Store) -> None:
        """Every ``now`` must be timezone-aware: a naive one is a caller bug, named."""
        await insert(store, new_occurrence("k"))
        with pytest.raises(ConfigError, match="aware"):
            await claim(store, now=NAIVE)
        with pytest.raises(ConfigError, match="aware"):
            await store.occurrence_reap(NAIVE)
        assert [o.state for o in await store.occurrence_list()] == [State.SCHEDULED]

    async def test_an_outcome_that_is_not_an_outcome_state_writes_nothing(
        self, store: Store
    ) -> None:
        """``running`` or ``skipped`` is no outcome: refused, and no other outcome of the
        batch is written either."""
        await insert(store, new_occurrence("a"), new_occurrence("b"))
        one, two = await claim(store, now=T0)
        outcomes = [
            Outcome(one.id, one.fencing_token, State.SUCCEEDED),
            Outcome(two.id, two.fencing_token, State.RUNNING),
        ]
        with pytest.raises(ConfigError, match="outcome state"):
            await store.occurrence_complete("i1", outcomes, at(1))
        assert {o.state for o in await store.occurrence_list()} == {State.RUNNING}

    async def test_plain_string_outcome_states_are_accepted(self, store: Store) -> None:
        """An outcome state given as its plain string value works like the enum."""
        await insert(store, new_occurrence("a"))
        (occ,) = await claim(store, now=T0)
        outcome = Outcome(occ.id, occ.fencing_token, "succeeded")  # type: ignore[arg-type]
        assert await store.occurrence_complete("i1", [outcome], at(1)) == {occ.id}
        assert [o.state for o in await store.occurrence_list()] == [State.SUCCEEDED]

    async def test_state_filters_are_checked(self, store: Store) -> None:
        """A state filter is a State or its value; anything else names the valid states."""
        await insert(store, new_occurrence("a"))
        found = await store.occurrence_list(state="scheduled")  # type: ignore[arg-type]
        assert [o.dedupe_key for o in found] == ["a"]
        with pytest.raises(ConfigError, match=r"'done'.*scheduled"):
            await store.occurrence_list(state="done")  # type: ignore[arg-type]

    async def test_tasks_must_be_a_collection_of_names(self, store: Store) -> None:
        """A bare string is not a set of one-letter task names."""
        await insert(store, new_occurrence("a", task="t"))
        with pytest.raises(ConfigError, match="'t'"):
            await claim(store, tasks="t", now=T0)

    async def test_a_plan_step_with_a_naive_time_inserts_nothing(self, store: Store) -> None:
        """plan_advance checks its times and items before the cursor moves."""
        bad = new_occurrence("a", due_at=NAIVE)
        with pytest.raises(ConfigError, match="aware"):
            await store.plan_advance(PlanAdvance("job", "", None, at(60), 1, [bad]))
        with pytest.raises(ConfigError, match="added_count"):
            await store.plan_advance(PlanAdvance("job", "", None, at(60), -1, []))
        assert await store.plan_cursor_get("job", "") is None
        assert await store.occurrence_list() == []

    async def test_times_in_other_zones_are_stored_in_utc(self, store: Store) -> None:
        """An aware time in another zone is the same instant, returned in UTC."""
        from datetime import timezone

        east = timezone(timedelta(hours=5))
        (occ,) = await insert(store, new_occurrence("a", due_at=T0.astimezone(east)))
        assert occ.due_at == T0 and occ.due_at.utcoffset() == timedelta(0)

    async def test_empty_input_answers_without_the_store(self, store: Store) -> None:
        """Nothing to insert, renew, complete, release or claim answers at once, even on a
        closed store (no round trip is made)."""
        await store.close()
        assert await store.occurrence_insert_many([]) == 0
        assert await store.lease_renew("i1", [], TTL, T0) == set()
        assert await store.occurrence_complete("i1", [], T0) == set()
        assert await store.lease_release("i1", [], T0) == set()
        assert await store.occurrence_claim("i1", [], 10, TTL, T0) == []
        assert await store.occurrence_claim("i1", ["task"], 0, TTL, T0) == []
        assert await store.occurrence_next_due([], T0) is None
        assert await store.occurrence_list(limit=0) == []
        await store.job_upsert([])
