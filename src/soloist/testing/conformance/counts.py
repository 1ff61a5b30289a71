"""Conformance: ``occurrence_counts``, what metrics and the dashboard read."""

from __future__ import annotations

import pytest

from soloist.errors import ConfigError
from soloist.models import ErrorCode, Outcome, State
from soloist.stores.base import Store
from soloist.stores.core import CheckedStore
from soloist.testing.clock import FakeClock
from soloist.testing.conformance.base import at, claim, insert, new_occurrence


class CountConformance:
    async def test_counts_of_an_empty_store(self, store: Store) -> None:
        """An empty store counts no pair and no due occurrence."""
        counts = await store.occurrence_counts()
        assert counts.by_job_state == {}
        assert counts.due == 0

    async def test_counts_by_job_and_state(self, store: Store, clock: FakeClock) -> None:
        """Every occurrence is counted once under its (job, state); zero pairs are absent."""
        await insert(
            store,
            new_occurrence("a1", job="a", task="ta"),
            new_occurrence("a2", job="a", task="ta"),
            new_occurrence("a3", job="a", task="ta", due_at=at(60)),
            new_occurrence("b1", job="b", task="tb"),
            new_occurrence("c1", job="c", task="tc"),
        )
        await claim(store, tasks=["tb"])
        (c,) = await claim(store, tasks=["tc"])
        applied = await store.occurrence_complete(
            "i1",
            [Outcome(c.id, c.fencing_token, State.DEAD, ErrorCode.HANDLER_ERROR.value, "boom")],
        )
        assert applied == {c.id}
        counts = await store.occurrence_counts()
        assert counts.by_job_state == {
            ("a", State.SCHEDULED): 3,
            ("b", State.RUNNING): 1,
            ("c", State.DEAD): 1,
        }
        assert all(isinstance(state, State) for _, state in counts.by_job_state)

    async def test_due_counts_claimable_occurrences_due_by_now(
        self, store: Store, clock: FakeClock
    ) -> None:
        """``due`` counts scheduled and failed (retry pending) rows with due_at <= now only."""
        await insert(
            store,
            new_occurrence("now", due_at=at(0)),
            new_occurrence("later", due_at=at(30)),
            new_occurrence("retry", task="tr", max_attempts=2),
            new_occurrence("run", task="tx"),
        )
        (retry,) = await claim(store, tasks=["tr"])
        await claim(store, tasks=["tx"])
        applied = await store.occurrence_complete(
            "i1",
            [
                Outcome(
                    retry.id,
                    retry.fencing_token,
                    State.FAILED,
                    ErrorCode.HANDLER_ERROR.value,
                    "again",
                    retry_at=at(10),
                )
            ],
        )
        assert applied == {retry.id}
        # "now" is due; "later" and the retry are not yet; "run" is running.
        assert (await store.occurrence_counts()).due == 1
        assert (await store.occurrence_counts(now=at(10))).due == 2
        clock.advance(30)
        counts = await store.occurrence_counts()
        assert counts.due == 3
        assert counts.by_job_state == {
            ("job", State.SCHEDULED): 2,
            ("job", State.FAILED): 1,
            ("job", State.RUNNING): 1,
        }

    async def test_counts_see_writes_of_another_handle(self, store: Store, store2: Store) -> None:
        """Counts read the shared store: occurrences inserted through another handle count."""
        await insert(store2, new_occurrence("x", job="other"))
        counts = await store.occurrence_counts()
        assert counts.by_job_state == {("other", State.SCHEDULED): 1}
        assert counts.due == 1

    async def test_counts_of_some_jobs_sum_every_other_job_by_state(
        self, store: CheckedStore, clock: FakeClock
    ) -> None:
        """``occurrence_counts(jobs=...)`` (what /metrics reads) gives the pairs of those
        jobs only and every other job's occurrences by state in ``others``, the same
        totals as the full counts; a name with no occurrence adds nothing."""
        await insert(
            store,
            new_occurrence("a1", job="a", task="ta"),
            new_occurrence("a2", job="a", task="ta", due_at=at(60)),
            new_occurrence("b1", job="b", task="tb"),
            new_occurrence("d1", job="dyn-1", task="td"),
            new_occurrence("d2", job="dyn-2", task="td", due_at=at(60)),
            new_occurrence("d3", job="dyn-3", task="tx"),
        )
        await claim(store, tasks=["tb"])
        (x,) = await claim(store, tasks=["tx"])
        applied = await store.occurrence_complete(
            "i1", [Outcome(x.id, x.fencing_token, State.SUCCEEDED, None, None)]
        )
        assert applied == {x.id}
        some = await store.occurrence_counts(jobs=["a", "b", "never-ran"])
        assert some.by_job_state == {("a", State.SCHEDULED): 2, ("b", State.RUNNING): 1}
        assert some.others == {State.SCHEDULED: 2, State.SUCCEEDED: 1}
        whole = await store.occurrence_counts()
        assert whole.others is None and some.due == whole.due == 2
        none_named = await store.occurrence_counts(jobs=[])
        assert none_named.by_job_state == {}
        assert none_named.others == {
            State.SCHEDULED: 4,
            State.RUNNING: 1,
            State.SUCCEEDED: 1,
        }
        with pytest.raises(ConfigError, match="expected a collection of job names"):
            await store.occurrence_counts(jobs="a")

    async def test_counts_of_some_jobs_of_an_empty_store(self, store: CheckedStore) -> None:
        """An empty store: no pair, no other occurrence, nothing due."""
        counts = await store.occurrence_counts(jobs=["a"])
        assert (counts.by_job_state, counts.others, counts.due) == ({}, {}, 0)
