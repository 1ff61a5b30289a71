"""Conformance: ``history_prune``, history retention (``soloist prune`` and the pruner)."""

from __future__ import annotations

from datetime import datetime

import pytest

from soloist.errors import ConfigError
from soloist.models import Occurrence, Outcome, State
from soloist.stores.base import Store
from soloist.testing.conformance.base import T0, at, claim, insert, new_occurrence


async def finish(
    store: Store,
    key: str,
    finished: datetime,
    *,
    job: str = "a",
    state: State = State.SUCCEEDED,
) -> Occurrence:
    """Insert occurrence ``key`` of ``job``, due at T0, claim it and end it with ``state``
    at ``finished``; returns it as inserted."""
    task = f"t-{job}"
    (occ,) = await insert(store, new_occurrence(key, job=job, task=task))
    (run,) = await claim(store, tasks=[task], limit=1, now=T0)
    assert run.id == occ.id
    outcome = Outcome(
        run.id, run.fencing_token, state, "handler_error" if state is State.DEAD else None
    )
    assert await store.occurrence_complete("i1", [outcome], now=finished) == {run.id}
    return occ


async def finish_five(store: Store) -> list[Occurrence]:
    """Five finished occurrences of job ``a``, finished at 1, 2, 3, 4 and 5 s."""
    return [await finish(store, f"a{n}", at(n + 1)) for n in range(5)]


async def kept(store: Store) -> list[str]:
    """The dedupe keys of every occurrence still there, sorted."""
    return sorted(o.dedupe_key for o in await store.occurrence_list(limit=1000))


class HistoryConformance:
    async def test_prune_by_age_oldest_first_in_batches(self, store: Store) -> None:
        """Finished occurrences finished before ``before`` go, oldest first, at most
        ``limit`` per call; a dry run counts them and deletes nothing."""
        await finish_five(store)
        assert await store.history_prune(at(4), None, 100, dry_run=True) == 3
        assert await kept(store) == ["a0", "a1", "a2", "a3", "a4"]
        assert await store.history_prune(at(4), None, 2) == 2
        assert await kept(store) == ["a2", "a3", "a4"]
        assert await store.history_prune(at(4), None, 2) == 1
        assert await store.history_prune(at(4), None, 2) == 0
        assert await kept(store) == ["a3", "a4"]

    async def test_prune_keeps_the_newest_count(self, store: Store) -> None:
        """With ``keep``, the oldest finished occurrences beyond the newest ``keep`` go;
        with both bounds, what either bound says goes."""
        await finish_five(store)
        assert await store.history_prune(None, 3, 100, dry_run=True) == 2
        assert await store.history_prune(None, 3, 1) == 1
        assert await store.history_prune(None, 3, 100) == 1
        assert await kept(store) == ["a2", "a3", "a4"]
        assert await store.history_prune(at(4), 10, 100) == 1
        assert await kept(store) == ["a3", "a4"]

    async def test_keep_counts_rows_that_finished_at_the_same_instant(self, store: Store) -> None:
        """``keep`` keeps exactly the newest ``keep``, also when finish times tie (the
        outcomes of one batch are written at one instant): rows that share the finish
        time of the last one kept are not all deleted with those beyond it."""
        await finish(store, "a0", at(1))
        batch = [new_occurrence(f"b{n}", job="a", task="t-a") for n in range(3)]
        await insert(store, *batch)
        runs = await claim(store, tasks=["t-a"], limit=3, now=T0)
        outcomes = [Outcome(r.id, r.fencing_token, State.SUCCEEDED) for r in runs]
        assert len(await store.occurrence_complete("i1", outcomes, now=at(2))) == 3
        await finish(store, "a4", at(3))
        assert await store.history_prune(None, 3, 100, dry_run=True) == 2
        assert await store.history_prune(None, 3, 100) == 2
        left = await kept(store)
        assert len(left) == 3 and "a4" in left and "a0" not in left
        assert await store.history_prune(None, 3, 100) == 0

    async def test_prune_without_bounds_deletes_nothing(self, store: Store) -> None:
        """Neither ``before`` nor ``keep``: nothing goes, as with a limit of zero."""
        await finish_five(store)
        assert await store.history_prune(None, None, 100) == 0
        assert await store.history_prune(at(100), 0, 0) == 0
        assert len(await kept(store)) == 5

    async def test_prune_never_touches_unfinished_occurrences(self, store: Store) -> None:
        """Scheduled, running and failed (retry pending) occurrences stay whatever their
        age; dead ones are history like succeeded ones."""
        await insert(store, new_occurrence("sched", job="s", task="ts", due_at=at(-50)))
        await insert(store, new_occurrence("run", job="r", task="tr"))
        await claim(store, tasks=["tr"], now=T0)
        await insert(store, new_occurrence("retry", job="f", task="tf", max_attempts=3))
        (run,) = await claim(store, tasks=["tf"], now=T0)
        failed = Outcome(run.id, 1, State.FAILED, "handler_error", retry_at=at(500))
        assert await store.occurrence_complete("i1", [failed], now=at(1)) == {run.id}
        await finish(store, "dead", at(2), state=State.DEAD)
        await finish(store, "newest", at(3))
        assert await store.history_prune(at(2.5), None, 100) == 1
        rows = {o.dedupe_key: o.state for o in await store.occurrence_list(limit=100)}
        assert rows == {
            "sched": State.SCHEDULED,
            "run": State.RUNNING,
            "retry": State.FAILED,
            "newest": State.SUCCEEDED,
        }
        assert await store.history_prune(None, 0, 100) >= 0
        left = {o.dedupe_key for o in await store.occurrence_list(limit=100)}
        assert {"sched", "run", "retry"} <= left

    async def test_pruned_occurrence_is_gone_with_its_attempts(self, store: Store) -> None:
        """A pruned occurrence, its attempt records and its dedupe key are gone: the key
        can be inserted again (an idempotency key holds while its occurrence is kept)."""
        first, *_ = await finish_five(store)
        assert await store.occurrence_attempts(first.id) != []
        assert await store.history_prune(at(2), None, 100) == 1
        assert await store.occurrence_get(first.id) is None
        assert await store.occurrence_attempts(first.id) == []
        again, created = await store.occurrence_insert(new_occurrence("a0", job="a", task="t-a"))
        assert created and again.id != first.id
        assert again.state is State.SCHEDULED

    async def test_prune_arguments_are_checked(self, store: Store) -> None:
        """A naive ``before`` or a negative ``keep`` is refused, naming the value."""
        with pytest.raises(ConfigError, match="before"):
            await store.history_prune(datetime(2026, 1, 1), None, 10)
        with pytest.raises(ConfigError, match="-1"):
            await store.history_prune(None, -1, 10)

    async def test_limits_beyond_any_integer_of_the_store_ask_for_everything(
        self, store: Store
    ) -> None:
        """A limit or keep larger than the store's integers (``soloist history --limit
        99999999999999999999``) reads or prunes as an unbounded one would, no driver
        overflow."""
        await finish_five(store)
        huge = 10**30
        assert len(await store.occurrence_list(limit=huge)) == 5
        assert await store.history_prune(None, huge, huge) == 0
        assert await store.history_prune(at(3), None, huge, dry_run=True) == 2


class LatestOutcomeConformance:
    """For stores that keep each job's newest finished occurrence (SQLite, PostgreSQL,
    memory): ``soloist status`` and the dashboard show it as the job's last outcome."""

    async def test_prune_keeps_each_jobs_newest_finished(self, store: Store) -> None:
        """However old, a job's newest finished occurrence stays; the others of the job
        go, oldest first, and other jobs are pruned on their own."""
        await finish(store, "rare", at(1), job="monthly")
        await finish_five(store)
        await finish(store, "b-old", at(2), job="b")
        await finish(store, "b-new", at(3), job="b")
        assert await store.history_prune(at(1000), None, 100, dry_run=True) == 5
        assert await store.history_prune(at(1000), 0, 100) == 5
        assert await kept(store) == ["a4", "b-new", "rare"]
        assert await store.history_prune(at(1000), 0, 100) == 0
